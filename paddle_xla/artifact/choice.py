"""How an artifact runs here: its exported executable for this platform, or its Graph re-lowered.

One rule for both artifact kinds: run the exported StableHLO when it was exported for this
platform and this jax can read it; else re-lower the Graph, and say why; with no Graph, refuse
and name the export that would run here."""

from __future__ import annotations

from collections.abc import Mapping

import jax

from ..errors import ModelLoadError
from .container import exported_member, lowering_moved


def pick(
    path: str,
    manifest: Mapping,
    members: Mapping[str, bytes],
    platform: str,
    has_graph: bool,
    prefer_graph: bool,
    *,
    refusal: str | None = None,
    what: str = "executable",
    verb: str = "run",
):
    """(exported or None, mode, why). `refusal` is a reason not to run the exported executable
    that the caller knows (a train step's Strategy that it was not exported for)."""
    if refusal is not None:
        return None, *relower_or_fail(path, manifest, platform, has_graph, refusal, verb)
    if prefer_graph and has_graph:
        return None, "relowered", "re-lowering from the Graph, as asked (prefer_graph=True)" + lowering_moved(manifest)
    member = exported_member(platform)
    if member not in members:
        exported_for = sorted(manifest.get("exported", {})) or "no platform"
        return None, *relower_or_fail(
            path,
            manifest,
            platform,
            has_graph,
            f"it was exported for {exported_for}, not for this machine's {platform!r}",
            verb,
        )
    try:
        exported = jax.export.deserialize(bytearray(members[member]))
        # NOTE: the StableHLO inside is parsed only when first compiled; parse it now, so that one
        # written by a newer jax (seen: 0.11.2's, read by 0.10.2) falls back to the Graph here.
        exported.mlir_module()
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else ""
        return None, *relower_or_fail(
            path,
            manifest,
            platform,
            has_graph,
            f"its {member}, written by jax {manifest.get('jax_version', '?')}, cannot be read by this jax "
            f"{jax.__version__} ({type(e).__name__}: {first})",
            verb,
        )
    return exported, "exported", f"running the {platform} {what} exported in {member}"


def relower_or_fail(
    path: str, manifest: Mapping, platform: str, has_graph: bool, reason: str, verb: str = "run"
) -> tuple[str, str]:
    """("relowered", why), or ModelLoadError when there is no Graph to re-lower."""
    if not has_graph:
        raise ModelLoadError(
            f"Cannot {verb} {path!r} here: {reason}, and it holds no Graph to re-lower from. Export it "
            f"again with platforms=(..., {platform!r}) and keep the Graph in it."
        )
    return "relowered", f"re-lowering from the Graph: {reason}{lowering_moved(manifest)}"
