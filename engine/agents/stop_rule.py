"""The learned stop rule: a small classifier on episode features predicting "searching on won't help".

Fitting uses scikit-learn (logistic regression on standardised features, or gradient-boosted
trees); the fitted model is exported to plain JSON — coefficients, or every tree's nodes — and
evaluated in numpy, so a run needs no scikit-learn and loading a rule never unpickles code.

The firing threshold is chosen on the training episodes: the lowest probability at which at
most `max_lost` of the searches that did find a new gold page later would have been cut off
(the rule saves as many searches as it can while rarely stopping an episode that was about
to find evidence).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.agents.stop_features import FEATURES, step_features
from tools.errors import DossierError, missing_dependency

__all__ = ["StopRule", "fit_stop_rule", "choose_threshold", "load_stop_rule"]

KINDS = ("logistic", "gb")


@dataclass(slots=True)
class StopRule:
    """A fitted stop rule: `probability(features)` of "searching on won't help"; fires at `threshold`."""

    kind: str  # "logistic" or "gb"
    features: tuple[str, ...]  # feature names, in order (engine.agents.stop_features.FEATURES)
    threshold: float  # fire when the probability reaches it
    params: dict  # logistic: mean, scale, coef, intercept; gb: init, learning_rate, trees
    min_searches: int = 1  # never fire before this many searches
    meta: dict | None = None  # training data, metrics and threshold choice, for the record

    def probability(self, x: list[float] | np.ndarray) -> np.ndarray:
        """P(searching on won't help) for one feature row or a (rows, features) array."""
        rows = np.atleast_2d(np.asarray(x, dtype=np.float64))  # (rows, features)
        if self.kind == "logistic":
            p = self.params
            z = ((rows - np.asarray(p["mean"])) / np.asarray(p["scale"])) @ np.asarray(p["coef"]) + p["intercept"]
        else:
            z = np.full(len(rows), self.params["init"], dtype=np.float64)
            for tree in self.params["trees"]:
                z += self.params["learning_rate"] * _tree_values(tree, rows)
        return 1.0 / (1.0 + np.exp(-z))

    def decide(self, steps: list[dict], question: str, max_iterations: int) -> tuple[bool, float] | None:
        """(fire, probability) after a search step of a live episode; None when the last step is not a search."""
        features = step_features(steps, question, max_iterations)
        if features is None:
            return None
        p = float(self.probability(features)[0])
        return p >= self.threshold and features[0] >= self.min_searches, p

    def to_json(self) -> dict:
        return {"format": "dossier-stop-rule/1", "kind": self.kind, "features": list(self.features),
                "threshold": self.threshold, "min_searches": self.min_searches, "params": self.params,
                "meta": self.meta or {}}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> StopRule:
        """Read a stop rule written by `dossier train stop`.

        Raises:
            DossierError: the file is missing, not JSON, or not a stop rule of a known format.
        """
        path = Path(path)
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DossierError(f"stop rule {str(path)!r} does not exist; write one with `dossier train stop`") from None
        except json.JSONDecodeError as err:
            raise DossierError(f"stop rule {str(path)!r} is not JSON ({err.msg}); give a file from `dossier train stop`") from None
        if not isinstance(obj, dict) or obj.get("format") != "dossier-stop-rule/1" or obj.get("kind") not in KINDS:
            raise DossierError(f"{str(path)!r} is not a stop rule written by `dossier train stop`")
        if tuple(obj["features"]) != FEATURES:
            raise DossierError(f"stop rule {str(path)!r} was fitted on other features ({obj['features']}); "
                               "refit it with this version's `dossier train stop`")
        return cls(obj["kind"], tuple(obj["features"]), float(obj["threshold"]), obj["params"],
                   int(obj.get("min_searches", 1)), obj.get("meta"))


@lru_cache(maxsize=8)
def load_stop_rule(path: str) -> StopRule:
    """A rule read once per path: every episode of a run asks the same one (a memo of a read-only file)."""
    return StopRule.load(path)


def _tree_values(tree: dict, rows: np.ndarray) -> np.ndarray:
    left, right = np.asarray(tree["left"]), np.asarray(tree["right"])
    feature, threshold, value = np.asarray(tree["feature"]), np.asarray(tree["threshold"]), np.asarray(tree["value"])
    out = np.empty(len(rows))
    for i, row in enumerate(rows):
        node = 0
        while left[node] != -1:
            node = left[node] if row[feature[node]] <= threshold[node] else right[node]
        out[i] = value[node]
    return out


def choose_threshold(p: np.ndarray, y: np.ndarray, max_lost: float) -> float:
    """The lowest threshold at which at most `max_lost` of the label-0 steps (searching on helped) would fire."""
    helped = np.sort(p[y == 0])[::-1]  # probabilities of steps where stopping would have lost evidence
    allowed = int(np.floor(max_lost * len(helped)))
    if len(helped) == 0:
        return float(np.min(p)) if len(p) else 0.5
    if allowed >= len(helped):
        return float(np.min(p))
    # fire strictly above the (allowed+1)-th highest "helped" probability
    return float(np.nextafter(helped[allowed], np.inf))


def fit_stop_rule(x: np.ndarray, y: np.ndarray, kind: str = "logistic", max_lost: float = 0.1, seed: int = 0,
                  min_searches: int = 1) -> StopRule:
    """Fit a rule on (rows, features) and 0/1 labels (1 = searching on won't help).

    Raises:
        DossierError: an unknown kind, or labels of one class only (nothing to learn).
        MissingDependencyError: scikit-learn is not installed.
    """
    if kind not in KINDS:
        raise DossierError(f"unknown stop-rule kind {kind!r}; choose {' or '.join(KINDS)}")
    classes = set(np.unique(y).tolist())
    if classes != {0, 1}:
        only = "won't help" if classes == {1} else "helped"
        raise DossierError(f"all {len(y)} training searches have the same label ('{only}'): the stop rule needs "
                           "episodes where a later search sometimes found a new gold page, and some where none did")
    try:
        from sklearn.ensemble import GradientBoostingClassifier
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        raise missing_dependency("scikit-learn (the stop rule's fitting)", "pip install 'dossier[train]'") from None
    x = np.asarray(x, dtype=np.float64)
    if kind == "logistic":
        mean, scale = x.mean(axis=0), x.std(axis=0)
        scale[scale == 0] = 1.0
        model = LogisticRegression(class_weight="balanced", max_iter=2000, random_state=seed)
        model.fit((x - mean) / scale, y)
        params = {"mean": mean.tolist(), "scale": scale.tolist(), "coef": model.coef_[0].tolist(),
                  "intercept": float(model.intercept_[0])}
    else:
        model = GradientBoostingClassifier(n_estimators=100, max_depth=2, learning_rate=0.1, subsample=0.8,
                                           random_state=seed)
        model.fit(x, y)
        trees = [{"left": t.tree_.children_left.tolist(), "right": t.tree_.children_right.tolist(),
                  "feature": t.tree_.feature.tolist(), "threshold": t.tree_.threshold.tolist(),
                  "value": t.tree_.value[:, 0, 0].tolist()} for t in model.estimators_[:, 0]]
        lr = float(model.learning_rate)
        init = float(model.decision_function(x[:1])[0] - lr * sum(
            _tree_values(tree, x[:1])[0] for tree in trees))
        params = {"init": init, "learning_rate": lr, "trees": trees}
    rule = StopRule(kind, FEATURES, 0.5, params, min_searches)
    rule.threshold = choose_threshold(rule.probability(x), np.asarray(y), max_lost)
    return rule
