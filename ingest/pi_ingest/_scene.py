"""Vectorized numpy rendering of the simulator's table-top scene (internal).

A scene is a table seen by one overhead camera and one wrist camera per arm. Everything is
drawn in table coordinates (u right, v away from the robot, both in [0, 1] on the table):
each camera owns a per-pixel (U, V) grid, and shapes become anti-aliased alpha masks computed
over the shape's bounding box only (a 320x240 frame costs ~3 ms on one core). Objects,
arms and fingers move with the robot's proprio trajectory, which makes consecutive frames
strongly correlated, as real camera streams are (and keeps the H.264 bitrate realistic).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

# RGB colours in 0..255 (float); objects pick from this palette so they read as "toys on a table".
_PALETTE = np.array(
    [
        (214, 48, 49),  # red
        (9, 132, 227),  # blue
        (0, 184, 148),  # green
        (253, 203, 110),  # yellow
        (162, 155, 254),  # lavender
        (225, 112, 85),  # orange
    ],
    dtype=np.float32,
)
_ARM_COLOUR = np.array((70, 74, 82), dtype=np.float32)
_FINGER_COLOUR = np.array((40, 42, 48), dtype=np.float32)
_FLOOR_COLOUR = np.array((58, 56, 52), dtype=np.float32)
# How far a shadow falls from its shape (table units) and how dark it is: a lamp up and left.
_SHADOW_OFFSET = (0.012, -0.016)
_SHADOW_DARKNESS = 0.35


@dataclass(frozen=True, slots=True)
class SceneObject:
    """A toy on the table: a shaded disc or box, resting at (u, v) unless an arm carries it."""

    shape: str  # "disc" or "box"
    u: float
    v: float
    size: float  # radius (disc) or half side (box), table units
    colour: tuple[float, float, float]
    carried_by: int | None  # arm index whose gripper moves it, or None


@dataclass(frozen=True, slots=True)
class Scene:
    """Everything about an episode's scene that does not change over time."""

    objects: tuple[SceneObject, ...]
    table_colour: tuple[float, float, float]
    wall_top: tuple[float, float, float]
    wall_bottom: tuple[float, float, float]
    grain_phase: float
    arm_bases_u: tuple[float, ...]


def random_scene(rng: np.random.Generator, arms: int) -> Scene:
    """Draw a scene: 2-3 objects, table/wall tints, one object carried by arm 0."""
    n = int(rng.integers(2, 4))
    colours = rng.choice(len(_PALETTE), size=n, replace=False)
    bases = (0.3, 0.7) if arms == 2 else (0.5,)
    objects = []
    for i in range(n):
        carried = 0 if i == 0 else None
        # The carried object rests within arm 0's reach; the others anywhere on the table.
        u = bases[0] + rng.uniform(-0.12, 0.12) if carried is not None else rng.uniform(0.15, 0.85)
        objects.append(
            SceneObject(
                shape="disc" if rng.random() < 0.5 else "box",
                u=float(u),
                v=float(rng.uniform(0.3, 0.75)),
                size=float(rng.uniform(0.035, 0.06)),
                colour=tuple(float(c) for c in _PALETTE[colours[i]]),  # type: ignore[arg-type]
                carried_by=carried,
            )
        )
    tint = rng.uniform(-12, 12, size=3)
    return Scene(
        objects=tuple(objects),
        table_colour=tuple(float(c) for c in np.array((176, 140, 100)) + tint),  # type: ignore[arg-type]
        wall_top=tuple(float(c) for c in np.array((205, 210, 218)) + tint / 2),  # type: ignore[arg-type]
        wall_bottom=tuple(float(c) for c in np.array((150, 156, 166)) + tint / 2),  # type: ignore[arg-type]
        grain_phase=float(rng.uniform(0, 2 * np.pi)),
        arm_bases_u=bases,
    )


def arm_layout(proprio_dim: int) -> tuple[int, int]:
    """(arms, joints per arm): two arms when there are >= 14 joints, as on ALOHA."""
    arms = 2 if proprio_dim >= 14 else 1
    return arms, proprio_dim // arms


def gripper_tracks(q: np.ndarray, scene: Scene) -> tuple[np.ndarray, np.ndarray]:
    """Forward kinematics of the toy arms.

    Args:
        q: proprio [F, D] at the frame times.

    Returns:
        positions [F, arms, 2] in table units and openings [F, arms] in [0, 1] (1 = open).
    """
    arms, per = arm_layout(q.shape[1])
    pos = np.empty((q.shape[0], arms, 2), dtype=np.float32)
    opening = np.empty((q.shape[0], arms), dtype=np.float32)
    for a in range(arms):
        b = a * per
        q2 = q[:, b + 2] if per > 3 else 0.0
        pos[:, a, 0] = scene.arm_bases_u[a] + 0.18 * np.sin(q[:, b])
        pos[:, a, 1] = 0.45 + 0.25 * np.sin(q[:, b + 1] + 0.5 * q2)
        opening[:, a] = np.clip(q[:, b + per - 1], 0.0, 1.0)
    return pos, opening


def object_tracks(scene: Scene, grip: np.ndarray, opening: np.ndarray) -> np.ndarray:
    """Object centres [F, n, 2]: a carried object is pulled towards its gripper as it closes."""
    out = np.empty((grip.shape[0], len(scene.objects), 2), dtype=np.float32)
    for i, obj in enumerate(scene.objects):
        rest = np.array((obj.u, obj.v), dtype=np.float32)
        if obj.carried_by is None:
            out[:, i] = rest
        else:
            pull = 0.8 * (1.0 - opening[:, obj.carried_by])[:, None]
            out[:, i] = rest + pull * (grip[:, obj.carried_by] - rest)
    return out


_Patch = tuple[np.ndarray, np.ndarray, np.ndarray]  # pixels (a view of the image), U, V


class _View(ABC):
    """A camera: maps pixels to table coordinates and back. Subclasses set the geometry."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.xs = np.arange(width, dtype=np.float32) + 0.5
        self.ys = np.arange(height, dtype=np.float32) + 0.5

    def patch(
        self, img: np.ndarray, us: np.ndarray, vs: np.ndarray, centre: np.ndarray | None
    ) -> _Patch | None:
        """The pixels of `img` covering the table-space points (us, vs) (a view: drawn on in
        place) and their table coordinates (U, V); None when off-screen."""
        x, y = self.project(us, vs, centre)
        x0, x1 = int(np.floor(x.min())) - 2, int(np.ceil(x.max())) + 2
        y0, y1 = int(np.floor(y.min())) - 2, int(np.ceil(y.max())) + 2
        x0, y0 = max(x0, 0), max(y0, 0)
        x1, y1 = min(x1, self.width), min(y1, self.height)
        if x0 >= x1 or y0 >= y1:
            return None
        rows, cols = slice(y0, y1), slice(x0, x1)
        u, v = self.grid(rows, cols, centre)
        return img[rows, cols], u, v

    @abstractmethod
    def project(
        self, us: np.ndarray, vs: np.ndarray, centre: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pixel (x, y) of table points; `centre` is the gripper position for wrist views."""

    @abstractmethod
    def grid(self, rows: slice, cols: slice, centre: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Table coordinates (U, V) of the pixels in `rows` x `cols`."""

    @abstractmethod
    def pixel_size(self) -> float:
        """Table units per pixel (about), the width of the anti-aliased edges."""


class OverheadView(_View):
    """A fixed camera above and behind the robot: wall above `horizon`, table in perspective."""

    def __init__(self, width: int, height: int, horizon: float) -> None:
        super().__init__(width, height)
        self.h0 = horizon * height
        t = np.clip((self.ys - self.h0) / (height - self.h0), 0.0, None)
        # Rows: v = 1 - t^0.8 puts the far table edge on the horizon and stretches the near
        # side, like a real camera looking down at ~40 degrees; the table also widens nearer.
        self._half_w = width * (0.28 + 0.3 * t)
        v = 1.0 - t**0.8
        u = 0.5 + (self.xs[None, :] - width / 2) / (2 * self._half_w[:, None])
        self.U = u.astype(np.float32)
        self.V = np.broadcast_to(v[:, None], (height, width)).astype(np.float32)
        self.wall = (self.ys < self.h0)[:, None] & np.ones((1, width), dtype=bool)

    def project(
        self, us: np.ndarray, vs: np.ndarray, centre: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        t = np.clip(1.0 - np.asarray(vs, dtype=np.float32), 0.0, None) ** 1.25
        y = self.h0 + t * (self.height - self.h0)
        x = self.width / 2 + (np.asarray(us) - 0.5) * 2 * self.width * (0.28 + 0.3 * t)
        return x, y

    def grid(self, rows: slice, cols: slice, centre: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        return self.U[rows, cols], self.V[rows, cols]

    def pixel_size(self) -> float:
        return 1.0 / (1.16 * self.width)


def _centre(centre: np.ndarray | None) -> np.ndarray:
    if centre is None:
        raise ValueError("a wrist view needs the gripper position as `centre`, got None")
    return centre


class WristView(_View):
    """A camera on a gripper looking down: the table slides under it as the arm moves."""

    def __init__(self, width: int, height: int, span: float) -> None:
        super().__init__(width, height)
        self.scale = span / width  # table units per pixel
        self.dx = (self.xs - width / 2) * self.scale
        self.dy = -(self.ys - height / 2) * self.scale  # image up = away from the robot

    def project(
        self, us: np.ndarray, vs: np.ndarray, centre: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        c = _centre(centre)
        x = self.width / 2 + (np.asarray(us) - c[0]) / self.scale
        y = self.height / 2 - (np.asarray(vs) - c[1]) / self.scale
        return x, y

    def grid(self, rows: slice, cols: slice, centre: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        c = _centre(centre)
        u = c[0] + self.dx[cols]
        v = c[1] + self.dy[rows]
        return np.broadcast_to(u[None, :], (len(v), len(u))), np.broadcast_to(v[:, None], (len(v), len(u)))

    def pixel_size(self) -> float:
        return self.scale


def _table(scene: Scene, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Table surface colour [h, w, 3]: wood grain, a soft lamp highlight, a floor outside."""
    grain = np.sin(u * 38.0 + 2.0 * np.sin(v * 5.0 + scene.grain_phase)) * 0.5 + 0.5
    light = 1.05 - 0.45 * ((u - 0.45) ** 2 + (v - 0.65) ** 2)
    shade = (0.9 + 0.1 * grain) * light
    img = np.asarray(scene.table_colour, dtype=np.float32) * shade[..., None]
    off = (u < 0) | (u > 1) | (v < 0) | (v > 1)
    return np.where(off[..., None], _FLOOR_COLOUR * (0.8 + 0.2 * light[..., None]), img).astype(np.float32)


def overhead_background(scene: Scene, view: OverheadView) -> np.ndarray:
    """The static part of an overhead frame: wall gradient above the horizon, table below."""
    img = _table(scene, view.U, view.V)
    t = np.clip(view.ys / max(view.h0, 1.0), 0.0, 1.0)[:, None, None]
    wall = np.asarray(scene.wall_top, np.float32) * (1 - t) + np.asarray(scene.wall_bottom, np.float32) * t
    return np.where(view.wall[..., None], wall, img).astype(np.float32)


def _blend(img: np.ndarray, alpha: np.ndarray, colour: np.ndarray) -> None:
    a = alpha[..., None]
    img *= 1.0 - a
    img += a * colour


def _shape_alpha(
    obj_shape: str, u: np.ndarray, v: np.ndarray, cu: float, cv: float, size: float, px: float
) -> tuple[np.ndarray, np.ndarray]:
    """Anti-aliased coverage and a shading factor for a disc or a box centred at (cu, cv)."""
    du, dv = u - cu, v - cv
    if obj_shape == "disc":
        r2 = (du * du + dv * dv) / (size * size)
        alpha = np.clip((1.0 - np.sqrt(r2)) * size / px, 0.0, 1.0)
        shade = 1.05 - 0.4 * r2 + 0.25 * (dv - du) / size  # lit from the top left: a ball
    else:
        edge = np.minimum(size - np.abs(du), size - np.abs(dv))
        alpha = np.clip(edge / px, 0.0, 1.0)
        shade = 0.95 + 0.12 * (dv - du) / size  # a flat top with a gentle gradient
    return alpha, shade


def draw_object(
    img: np.ndarray,
    view: _View,
    centre: np.ndarray | None,
    obj: SceneObject,
    cu: float,
    cv: float,
    size: float,
) -> None:
    """Draw an object's shadow then its body into `img` in place."""
    px = view.pixel_size()
    su, sv = cu + _SHADOW_OFFSET[0], cv + _SHADOW_OFFSET[1]
    reach = size * 1.5
    found = view.patch(
        img,
        np.array([cu - reach, cu + reach, su - reach, su + reach]),
        np.array([cv - reach, cv + reach, sv - reach, sv + reach]),
        centre,
    )
    if found is None:
        return
    patch, u, v = found
    shadow, _ = _shape_alpha(obj.shape, u, v, su, sv, size * 1.1, px * 3)
    patch *= (1.0 - _SHADOW_DARKNESS * shadow)[..., None]
    alpha, shade = _shape_alpha(obj.shape, u, v, cu, cv, size, px)
    colour = np.asarray(obj.colour, np.float32) * np.clip(shade, 0.4, 1.3)[..., None]
    a = alpha[..., None]
    patch *= 1.0 - a
    patch += a * colour


def draw_arm(img: np.ndarray, view: OverheadView, base_u: float, grip: np.ndarray, opening: float) -> None:
    """An arm seen from above: a shaded link from its base to the gripper, and two fingers."""
    px = view.pixel_size()
    a = np.array((base_u, -0.15), np.float32)
    b = grip.astype(np.float32)
    width = 0.025
    found = view.patch(
        img,
        np.array([a[0] - 0.08, a[0] + 0.08, b[0] - 0.08, b[0] + 0.08]),
        np.array([a[1] - 0.08, a[1] + 0.08, b[1] - 0.08, b[1] + 0.08]),
        None,
    )
    if found is None:
        return
    patch, u, v = found
    ab = b - a
    for offset, darkness in ((_SHADOW_OFFSET, _SHADOW_DARKNESS), ((0.0, 0.0), -1.0)):
        pu, pv = u - a[0] - offset[0], v - a[1] - offset[1]
        h = np.clip((pu * ab[0] + pv * ab[1]) / float(ab @ ab), 0.0, 1.0)
        du, dv = pu - h * ab[0], pv - h * ab[1]
        dist = np.sqrt(du * du + dv * dv)
        if darkness > 0:  # the shadow: a soft darkening of what is below
            alpha = np.clip((width * 1.2 - dist) / (px * 4), 0.0, 1.0)
            patch *= (1.0 - darkness * alpha)[..., None]
        else:  # the link: a cylinder, bright along its axis
            alpha = np.clip((width - dist) / px, 0.0, 1.0)
            shade = 1.25 - 0.6 * (dist / width) ** 2
            _blend(patch, alpha, _ARM_COLOUR * np.clip(shade, 0.5, 1.3)[..., None])
    gap = 0.012 + 0.035 * opening
    for side in (-1.0, 1.0):
        fu, fv = float(b[0]) + side * gap, float(b[1]) + 0.025
        du, dv = np.abs(u - fu), np.abs(v - fv)
        edge = np.minimum(0.008 - du, 0.03 - dv)
        _blend(patch, np.clip(edge / px, 0.0, 1.0), _FINGER_COLOUR)


def draw_wrist_fingers(img: np.ndarray, opening: float) -> None:
    """The gripper's own fingers, fixed in a wrist camera's frame; they part as it opens."""
    h, w = img.shape[:2]
    fw, fh = max(2, int(0.09 * w)), max(2, int(0.38 * h))
    gap = int((0.06 + 0.2 * opening) * w)
    # A vertical gradient: the fingertips (top) catch more light than the base.
    grad = np.linspace(1.2, 0.7, fh, dtype=np.float32)[:, None, None]
    across = np.linspace(0.8, 1.1, fw, dtype=np.float32)[None, :, None]
    finger = _FINGER_COLOUR * grad * across
    for x0 in (w // 2 - gap - fw, w // 2 + gap):
        x0c, x1c = max(x0, 0), min(x0 + fw, w)
        if x0c < x1c:
            img[h - fh :, x0c:x1c] = finger[:, x0c - x0 : x1c - x0]


def render_overhead(
    scene: Scene,
    view: OverheadView,
    background: np.ndarray,
    objects: np.ndarray,
    grips: np.ndarray,
    openings: np.ndarray,
    frame: int,
) -> np.ndarray:
    """One overhead frame as uint8 RGB."""
    img = background.copy()
    for i, obj in enumerate(scene.objects):
        lift = 1.0 if obj.carried_by is None else 1.0 + 0.25 * (1.0 - float(openings[frame, obj.carried_by]))
        draw_object(
            img, view, None, obj, float(objects[frame, i, 0]), float(objects[frame, i, 1]), obj.size * lift
        )
    for a, base_u in enumerate(scene.arm_bases_u):
        draw_arm(img, view, base_u, grips[frame, a], float(openings[frame, a]))
    return np.clip(img, 0, 255).astype(np.uint8)


def render_wrist(
    scene: Scene,
    view: WristView,
    arm: int,
    objects: np.ndarray,
    grips: np.ndarray,
    openings: np.ndarray,
    frame: int,
) -> np.ndarray:
    """One wrist-camera frame of `arm` as uint8 RGB."""
    centre = grips[frame, arm]
    u, v = view.grid(slice(0, view.height), slice(0, view.width), centre)
    img = _table(scene, u, v)
    for i, obj in enumerate(scene.objects):
        if obj.carried_by == arm:
            size = obj.size * (1.0 + 0.6 * (1.0 - float(openings[frame, arm])))  # nearer the lens
        else:
            size = obj.size
        draw_object(img, view, centre, obj, float(objects[frame, i, 0]), float(objects[frame, i, 1]), size)
    draw_wrist_fingers(img, float(openings[frame, arm]))
    return np.clip(img, 0, 255).astype(np.uint8)
