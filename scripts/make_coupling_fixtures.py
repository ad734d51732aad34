#!/usr/bin/env python3
"""Position coupling (Cho et al. 2024), from the paper's repository
(HanseulJo/position-coupling, `src/data/addition.py`, class
`AdditionDatasetWithCoupledPositions`): with the operands written most significant digit
first, an operand `a` takes the position ids `end - len(a) … end - 1` and the operator after
it `end`, where `end = start + max_len + 1`; the sum, padded to `max_len + 1` digits, takes
`end - len(sum) … end - 1`, and, written least significant digit first (`reverse_output`),
its ids reversed with it. Digits of one significance share an id; the operators sit beside
the units. Here `start = 1`, as the repository evaluates.

posenc's lengthgen writes every number least significant digit first: `a + b`, the
separator, the sum in `n + 1` digits, the end token. For instances of `addition-mixed`
(operands of different lengths, in either order), this script writes the token ids in that
format and, for every token but the end, the id the repository's rule gives it (each
operand's digits reversed with their ids). crates/posenc/tests/coupling.rs checks that the
`coupling` encoding's rows are those ids reflected: its id plus the reference's is one
constant over each instance.

The repository's relative variant (`coupled_relative_bias`, in
`src/model/modeling/custom_t5_decoder_only.py`) reads the same ids in attention: query `i`
and key `j` take bucket `clip(id[j] - id[i] + B // 2, 0, B - 1)` of a learned `(B, heads)`
table, `B = relative_attention_num_buckets` (7 in its scripts). For every case this script
also writes that bucket matrix (`reference_buckets`, over every token but the end), which
the same test checks `coupling-bias` against. Standard library only.

    python3 scripts/make_coupling_fixtures.py

writes crates/posenc/tests/fixtures/coupling.json.
"""
import json
import os
import random

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "posenc", "tests",
                   "fixtures", "coupling.json")
SEP, EOS, PLUS, DIGIT = 1, 2, 3, 4  # posenc lengthgen's vocabulary
BUCKETS = 7  # relative_attention_num_buckets in the repository's scripts


def reference_ids(a, b):
    """The repository's ids for `a+b` and its sum, most significant digit first, with
    `start = 1`: (ids of a's digits and `+`, ids of b's digits and `=`, ids of the sum's
    digits, the sum reversed as `reverse_output` writes it)."""
    a, b = str(a), str(b)
    result = str(int(a) + int(b))
    max_len = max(len(a), len(b))
    labels = "0" * (max_len + 1 - len(result)) + result  # padded to max_len + 1
    start = 1
    end = start + max_len + 1
    input_positions = list(range(end - len(a), end + 1)) + list(range(end - len(b), end + 1))
    label_positions = list(range(end - len(labels), end))
    return a, b, labels, input_positions, label_positions


def instance(a, b):
    """posenc's tokens for `a + b` (least significant digit first), and the reference's id
    of each token but the end."""
    a_s, b_s, labels, inp, lab = reference_ids(a, b)
    ids_a, ids_b = inp[:len(a_s) + 1], inp[len(a_s) + 1:]
    digits = lambda s: [DIGIT + int(c) for c in s]
    tokens = (digits(a_s[::-1]) + [PLUS] + digits(b_s[::-1]) + [SEP]
              + digits(labels[::-1]) + [EOS])
    # Each operand's digits are reversed with their ids; its operator keeps its own.
    ref = (ids_a[:-1][::-1] + [ids_a[-1]] + ids_b[:-1][::-1] + [ids_b[-1]] + lab[::-1])
    assert len(ref) == len(tokens) - 1
    return {"a": int(a), "b": int(b), "tokens": tokens, "reference_ids": ref,
            "buckets": BUCKETS, "reference_buckets": relative_buckets(ref, BUCKETS)}


def relative_buckets(ids, num_buckets):
    """The repository's `coupled_relative_bias` buckets: `relative_position =
    memory_position - context_position` (key minus query), shifted by `num_buckets // 2`
    and clipped to the table."""
    return [[min(max(key - query + num_buckets // 2, 0), num_buckets - 1) for key in ids]
            for query in ids]


def main():
    rng = random.Random(0)
    cases = []
    for la, lb in [(1, 1), (3, 1), (1, 4), (5, 5), (7, 2), (2, 9), (10, 10), (13, 6)]:
        a = rng.randrange(10 ** (la - 1), 10 ** la) if la > 1 else rng.randrange(10)
        b = rng.randrange(10 ** (lb - 1), 10 ** lb) if lb > 1 else rng.randrange(10)
        cases.append(instance(a, b))
    # One carried all the way: 999 + 1.
    cases.append(instance(999, 1))
    with open(OUT + ".part", "w") as f:
        # A case a line: the bucket matrices would take thousands of lines indented.
        f.write('{"cases": [\n' + ",\n".join(json.dumps(c) for c in cases) + "\n]}\n")
    os.replace(OUT + ".part", OUT)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
