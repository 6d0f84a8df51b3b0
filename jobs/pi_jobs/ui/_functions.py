"""Which ClickHouse functions and table functions the Query page lets a query call.

Every function of the engine in use is classified (tests/jobs/ui/test_functions.py fails when
the engine grows one that is not): `_function_names.PURE` lists the functions that compute
from their arguments only (generated from chdb 26.9's `system.functions` by
`python -m pi_jobs.ui._functions`, less those refused here), `REFUSED` names each refused one
with the reason. A name the engine knows but this module does not is refused too, so a newer
server's functions are closed until someone classifies them.

Refused: whatever reaches the filesystem (`file`, filesystem sizes), the network (the AI
functions call model providers), other data sources (dictionaries, whose sources may be files,
URLs or other databases; `joinGet`), the server's or the process's own state (host, ports,
settings, macros, users, roles, query ids, version, introspection of its memory and logs), or
ties up a query slot doing nothing (`sleep`). Table functions: only the pure generators
(`numbers`, `zeros`, `generate_series`, `primes`, `values`).
"""

from __future__ import annotations

_SERVER = "reads the server's or the process's own state"
_FILES = "reads the filesystem"
_NETWORK = "reaches the network"
_SOURCES = "reads a data source other than the catalog's tables"
_INTERNAL = "is internal to the engine"
_IDLE = "holds a query slot without doing work"
_INTROSPECTION = "inspects the server process (memory, symbols, logs)"

_GROUPS: dict[str, tuple[str, ...]] = {
    _FILES: ("file", "filesystemAvailable", "filesystemCapacity", "filesystemUnreserved"),
    _NETWORK: (
        "aiClassify", "aiEmbed", "aiExtract", "aiFilter", "aiGenerate", "aiRedact",
        "aiSimilarity", "aiTranslate",
    ),
    _SOURCES: (
        "dictGet", "dictGetAll", "dictGetChildren", "dictGetDate", "dictGetDateOrDefault",
        "dictGetDateTime", "dictGetDateTimeOrDefault", "dictGetDescendants", "dictGetFloat32",
        "dictGetFloat32OrDefault", "dictGetFloat64", "dictGetFloat64OrDefault",
        "dictGetHierarchy", "dictGetIPv4", "dictGetIPv4OrDefault", "dictGetIPv6",
        "dictGetIPv6OrDefault", "dictGetInt16", "dictGetInt16OrDefault", "dictGetInt32",
        "dictGetInt32OrDefault", "dictGetInt64", "dictGetInt64OrDefault", "dictGetInt8",
        "dictGetInt8OrDefault", "dictGetKeys", "dictGetOrDefault", "dictGetOrNull", "dictGetRoot",
        "dictGetString", "dictGetStringOrDefault", "dictGetUInt16", "dictGetUInt16OrDefault",
        "dictGetUInt32", "dictGetUInt32OrDefault", "dictGetUInt64", "dictGetUInt64OrDefault",
        "dictGetUInt8", "dictGetUInt8OrDefault", "dictGetUUID", "dictGetUUIDOrDefault", "dictHas",
        "dictIsIn", "regionHierarchy", "regionIn", "regionToArea", "regionToCity",
        "regionToContinent", "regionToCountry", "regionToDistrict", "regionToName",
        "regionToPopulation", "regionToTopContinent", "joinGet", "joinGetOrNull",
        "naiveBayesClassifier", "naiveBayesClassifierWithAllProbs", "naiveBayesClassifierWithProb",
        "hasColumnInTable", "getMaxTableNameLengthForDatabase", "pgTableIsVisible",
        "generateSerialID",
    ),
    _SERVER: (
        "FQDN", "hostName", "buildId", "version", "revision", "uptime", "serverUUID", "tcpPort",
        "getServerPort", "displayName", "getOSKernelVersion", "getMacro", "getSetting",
        "getSettingOrDefault", "getServerSetting", "getMergeTreeSetting", "currentUser",
        "authenticatedUser", "currentProfiles", "enabledProfiles", "defaultProfiles",
        "currentRoles", "enabledRoles", "defaultRoles", "currentDatabase", "currentSchemas",
        "currentQueryID", "queryID", "initialQueryID", "initialQueryStartTime", "connectionId",
        "currentHandler", "currentRequestURL", "getClientHTTPHeader", "showCertificate",
        "zookeeperSessionUptime", "shardNum", "shardCount", "transactionID",
        "transactionLatestSnapshot", "transactionOldestSnapshot", "globalVariable",
        "hasThreadFuzzer", "pgGetUserById",
    ),
    _INTROSPECTION: (
        "addressToLine", "addressToLineWithInlines", "addressToSymbol", "demangle", "logTrace",
        "tid", "isMergeTreePartCoveredBy", "mergeTreePartInfo",
    ),
    _IDLE: ("sleep", "sleepEachRow"),
    _INTERNAL: (
        "_CAST", "__actionName", "__applyFilter", "__bitBoolMaskAnd", "__bitBoolMaskOr",
        "__bitSwapLastTwo", "__bitWrapperFunc", "__getScalar", "__groupingForCube",
        "__groupingForGroupingSets", "__groupingForRollup", "__groupingOrdinary",
        "__patchPartitionID", "__scalarSubqueryResult", "__toYearCalendarOnly", "nested",
        "validateNestedArraySizes",
    ),
}  # fmt: skip

REFUSED: dict[str, str] = {name: reason for reason, names in _GROUPS.items() for name in names}
"""Functions a query of the Query page may not call, with the reason."""

# What the parser makes of syntax (`x -> y`, EXISTS, GROUPING) that is no function of
# system.functions; each only combines what the rules check elsewhere.
SYNTAX_FUNCTIONS = frozenset({"lambda", "exists", "grouping"})

ALLOWED_TABLE_FUNCTIONS = frozenset(
    {"numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateSeries", "primes", "values"}
)
"""Table functions that generate rows from their arguments alone."""

_TABLE_GROUPS: dict[str, tuple[str, ...]] = {
    _FILES: (
        "file", "fileCluster", "filesystem", "deltaLakeLocal", "icebergLocal", "icebergLocalCluster",
        "paimonLocal", "mergeTreeIndex", "mergeTreeProjection", "mergeTreeTextIndex",
        "mergeTreeAnalyzeIndexes", "mergeTreeAnalyzeIndexesUUID", "mergeTreeCodecBlockCounts",
    ),
    _NETWORK: (
        "url", "urlCluster", "s3", "s3Cluster", "gcs", "cosn", "oss", "azureBlobStorage",
        "azureBlobStorageCluster", "hdfs", "hdfsCluster", "deltaLake", "deltaLakeAzure",
        "deltaLakeAzureCluster", "deltaLakeCluster", "deltaLakeS3", "deltaLakeS3Cluster", "hudi",
        "hudiCluster", "iceberg", "icebergAzure", "icebergAzureCluster", "icebergCluster",
        "icebergHDFS", "icebergHDFSCluster", "icebergS3", "icebergS3Cluster", "paimon",
        "paimonAzure", "paimonAzureCluster", "paimonCluster", "paimonHDFS", "paimonHDFSCluster",
        "paimonS3", "paimonS3Cluster", "mysql", "postgresql", "mongodb", "redis", "sqlite", "jdbc",
        "odbc", "remote", "remoteSecure", "cluster", "clusterAllReplicas", "bigquery", "ytsaurus",
        "prometheusQuery", "prometheusQueryRange",
    ),
    _SERVER: (
        "executable", "python", "arrowstream", "input", "eval", "merge", "dictionary", "view",
        "viewExplain", "viewIfPermitted", "loop", "timeSeriesData", "timeSeriesMetricFamilies",
        "timeSeriesMetrics", "timeSeriesSamples", "timeSeriesSelector", "timeSeriesTags",
    ),
    "generates rows the Query page has no use for": (
        "format", "fuzzJSON", "fuzzQuery", "generateRandom", "null", "SQLStandardValues",
    ),
}  # fmt: skip

REFUSED_TABLE_FUNCTIONS: dict[str, str] = {
    name: reason for reason, names in _TABLE_GROUPS.items() for name in names
}
"""Table functions a query may not call, with the reason (every one but the generators)."""


def _generate() -> str:  # pragma: no cover - run by hand when the engine is upgraded
    import chdb

    rows = chdb.query("SELECT name, alias_to FROM system.functions", "TSV").bytes().decode()
    refused = {n.lower() for n in REFUSED}
    names = sorted(
        name
        for name, alias in (row.split("\t") for row in rows.splitlines())
        if name.lower() not in refused and alias.lower() not in refused and name not in SYNTAX_FUNCTIONS
    )
    lines, line = [], ""
    for name in names:
        if len(line) + len(name) + 1 > 90:
            lines.append(f'    "{line.rstrip()}",')
            line = ""
        line += name + " "
    lines.append(f'    "{line.rstrip()}",')
    body = "\n".join(lines)
    return (
        '"""Functions of chdb 26.9 that compute from their arguments only (generated by\n'
        "`python -m pi_jobs.ui._functions`: system.functions less\n"
        'pi_jobs.ui._functions.REFUSED and the aliases of those)."""\n\n'
        "_NAMES = (\n" + body + "\n)\n\n"
        "PURE = frozenset(name for line in _NAMES for name in line.split())\n"
    )


if __name__ == "__main__":  # pragma: no cover
    from pathlib import Path

    Path(__file__).with_name("_function_names.py").write_text(_generate())
