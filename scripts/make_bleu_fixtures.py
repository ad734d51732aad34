#!/usr/bin/env python3
"""Corpus BLEU reference values from sacreBLEU for crates/kotoba/tests/metrics.rs.

    .venv/bin/python scripts/make_bleu_fixtures.py
"""
import json
import os

import sacrebleu

CASES = {
    "identical": (["inu ga neko o oikakeru", "neko ga nemuru"], ["inu ga neko o oikakeru", "neko ga nemuru"]),
    "one_word_wrong": (["inu ga neko o oikaketa", "neko ga nemuru"], ["inu ga neko o oikakeru", "neko ga nemuru"]),
    "swapped_roles": (["neko ga inu o oikakeru"], ["inu ga neko o oikakeru"]),
    "short_hypothesis": (["inu ga", "neko ga kawa de"], ["inu ga neko o oikakeru", "neko ga kawa no chikaku de nemuru"]),
    "no_4gram_match": (["a b c d e"], ["a b x c d y e"]),
    "longer_hypothesis": (["furui sensei ga gakkou no ushiro de gakusei o oshieta soshite inu ga hashiru"],
                          ["furui sensei ga gakkou no ushiro de gakusei o oshieta"]),
    "too_short_for_4grams": (["inu ga neko"], ["inu ga neko o miru"]),
    "mixed_corpus": (
        ["kitsune ga hashitta soshite kawaii usagi ga eki de kuma o mitsuketa", "ookii inu ga kouen de neko o oikaketa",
         "tori ga utau", "isha ga ie de kodomo o tasuketa"],
        ["kitsune ga hashitta soshite kawaii usagi ga eki de kuma o mitsuketa", "ookii inu ga kouen de chiisai neko o oikaketa",
         "tori ga mori de utau", "isha ga kodomo o tasuketa"]),
}

out = {name: {"hypotheses": h, "references": r, "bleu": sacrebleu.corpus_bleu(h, [r]).score}
       for name, (h, r) in CASES.items()}
path = os.path.join(os.path.dirname(__file__), "..", "crates", "kotoba", "tests", "fixtures", "bleu.json")
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as f:
    json.dump({"sacrebleu": sacrebleu.__version__, "cases": out}, f, indent=1)
print({k: round(v["bleu"], 4) for k, v in out.items()})
