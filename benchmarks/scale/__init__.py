"""Scale benchmark (issue 11): lake costs against lake size; see run.py."""
