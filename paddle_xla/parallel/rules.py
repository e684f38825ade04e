"""Stage rules on layer paths: {"embeddings": 0, "encoder.layers.0-3": 1, "encoder.layers.4-*": 2}.

A rule is a dotted path of the model's own attribute names, as in `net.state_dict()` keys. It
matches a weight when its parts match consecutive parts of the weight's key, anywhere in it, so
"encoder.layers.0-3" matches "bert.encoder.layers.2.linear1.weight". A part is a name, `*` (any one
part), an index `N`, or an index range `N-M` (inclusive; `N-*` is open-ended). When several rules
match one weight, the one with the most parts wins. The syntax is parsed by strategy.parse_rule."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import StrategyError
from ..strategy import parse_rule


def stages_of_weights(rules: Mapping[str, int], keys: Mapping[str, str]) -> dict[str, int]:
    """weight name -> stage, for the weights some rule matches. `keys` maps weight names to their
    state_dict keys. Raises when a rule matches nothing or two equally specific rules disagree."""
    parsed = [(parse_rule(text), stage) for text, stage in rules.items()]
    out: dict[str, int] = {}
    used: set[str] = set()
    for name, key in keys.items():
        hits = [(len(r.parts), r, s) for r, s in parsed if r.matches(key)]
        if not hits:
            continue
        best = max(h[0] for h in hits)
        top = [(r, s) for n, r, s in hits if n == best]
        if len({s for _, s in top}) > 1:
            raise StrategyError(
                f"The weight {key!r} matches placement rules "
                + ", ".join(f"{r.text!r} -> {s}" for r, s in top)
                + " equally; make one of them more specific (more path parts)."
            )
        used |= {r.text for r, _ in top}
        out[name] = top[0][1]
    unused = [t for t in rules if t not in used]
    if unused:
        sample = ", ".join(sorted(keys.values())[:6])
        raise StrategyError(
            f"The placement rule(s) {unused} match no weight of the model. Rules are paths of the "
            f"model's layer attributes as in net.state_dict() keys, e.g. {sample} ..."
        )
    return out
