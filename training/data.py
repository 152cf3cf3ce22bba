#!/usr/bin/env python3
"""Seeded generators of the tiny model's training and held-out data (Python stdlib only).

Five task families:

  arith      GSM8K-format word problems: 1 to 3 operations (+, -, *, exact /) over integers 0..999, every
             intermediate result in 0..999; the answer is one "a op b = c" line per step, then "#### N".
  mc         multiple choice with 4 to 10 options (A..J) over facts defined here (number comparisons, unit
             conversions, a small invented knowledge base), options shuffled; answered "Answer: X".
  retrieval  key-value lookup in a list of "The code of QZX-17 is 4821." lines, 256 to 4096 tokens of context
             (training also uses 64..256 as a curriculum); answered with the number.
  tools      function calling in the chat template's format (tools in the system part, <tool_call>name
             <arg_key>k</arg_key><arg_value>v</arg_value></tool_call>), reasoning in <think>, a second turn that
             answers from the tool result, and questions that need no tool.
  vision     112x112 pictures of coloured squares, circles and triangles on a 4x4 grid of 28-pixel cells
             (one merged vision token per cell): colour, shape, count (1..5) and position questions.

Splits are disjoint by construction: every item has a canonical key (the computation of an arithmetic problem,
the question with its set of options, the scene and question of a picture, ...), a key belongs to the held-out
split when sha1("<family>|<key>") mod 16 == 0, and each split's generator redraws until the key is on its side.
So no held-out prompt, and no held-out arithmetic computation under any phrasing, occurs in training.

Every item is a conversation (OpenAI message shape); training/chat.py renders it with the chat template.

    python3 training/data.py evals [--out evals/data/tiny] [--n 300]     # held-out sets for the eval tasks
    python3 training/data.py corpus --out FILE [--scale 1]              # tokenizer training text
    python3 training/data.py sample --family arith [--n 3] [--split train]
"""

import argparse
import hashlib
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import chat  # noqa: E402
import png  # noqa: E402

FAMILIES = ("arith", "mc", "retrieval", "tools", "vision")
HELDOUT_MOD = 16
DEFAULT_SEED = 5353
IMAGE_SIZE = 112  # 4x4 cells of 28 pixels = one merged vision token each: 16 image tokens per picture
CELL = 28
# Measured with training/tokenizer/tokenizer.json: ~15.4 tokens per "The code of QZX-17 is 4821." line (digits are
# single tokens) and ~50 for the rest of the prompt and the answer.
RETRIEVAL_TOKENS_PER_LINE = 15.4
RETRIEVAL_OVERHEAD_TOKENS = 50
RETRIEVAL_HELDOUT_LENGTHS = (256, 512, 1024, 2048, 4096)
# Special strings generated text never contains (the loss spans are found by them).
MARKERS = ("<|assistant|>", "<|user|>", "<|system|>", "<|observation|>", "<|endoftext|>")


def in_heldout(family, key):
    h = hashlib.sha1(f"{family}|{key}".encode("utf-8")).digest()
    return int.from_bytes(h[:4], "big") % HELDOUT_MOD == 0


def item_rng(seed, family, split, index):
    # str seeds are hashed with SHA-512 by random.Random: the same on every machine and Python version >= 3.2
    return random.Random(f"glm53-tiny|{seed}|{family}|{split}|{index}")


def make_item(family, split, index, seed=DEFAULT_SEED, **opts):
    """The index-th item of a family's split: a dict with family, split, id, key, messages (the whole
    conversation, ending with the assistant turn whose gold is `answer`), tools (or None), answer, meta."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be train or heldout, not {split!r}")
    rng = item_rng(seed, family, split, index)
    want = split == "heldout"
    for _ in range(10000):
        it = GENERATORS[family](rng, split=split, **opts)
        if in_heldout(family, it["key"]) == want:
            it.update(family=family, split=split, id=f"{family}-{split}-{index:06d}")
            it.setdefault("tools", None)
            it.setdefault("meta", {})
            return it
    raise RuntimeError(f"{family}: no {split} item in 10000 draws (key space too small?)")


# ----------------------------------------------------------------------------------------------------------
# Shared vocabulary
# ----------------------------------------------------------------------------------------------------------

NAMES = [("Mia", "she"), ("Liam", "he"), ("Ava", "she"), ("Noah", "he"), ("Emma", "she"), ("Oliver", "he"),
         ("Sofia", "she"), ("Lucas", "he"), ("Chloe", "she"), ("Ethan", "he"), ("Grace", "she"), ("Mason", "he"),
         ("Lily", "she"), ("James", "he"), ("Zoe", "she"), ("Leo", "he"), ("Hannah", "she"), ("Omar", "he"),
         ("Nora", "she"), ("Ravi", "he"), ("Elena", "she"), ("Kenji", "he"), ("Amara", "she"), ("Diego", "he"),
         ("Ines", "she"), ("Tomas", "he"), ("Priya", "she"), ("Yusuf", "he"), ("Julia", "she"), ("Felix", "he"),
         ("Sara", "she"), ("Hugo", "he"), ("Maya", "she"), ("Arjun", "he"), ("Lena", "she"), ("Samuel", "he"),
         ("Aisha", "she"), ("Marco", "he"), ("Ruth", "she"), ("Victor", "he"), ("Clara", "she"), ("Ben", "he"),
         ("Nadia", "she"), ("Pablo", "he"), ("Olga", "she"), ("Tariq", "he"), ("Mei", "she"), ("Jonas", "he")]
OBJECTS = ["marbles", "apples", "stickers", "coins", "books", "pencils", "cookies", "stamps", "shells", "cards",
           "beads", "toy cars", "balloons", "eggs", "seeds", "candies", "buttons", "crayons", "tickets", "flowers",
           "oranges", "cupcakes", "paper cranes", "bottle caps", "postcards", "rocks", "lemons", "muffins"]
PRONOUN = {"she": ("she", "her", "She"), "he": ("he", "him", "He")}


def _person(rng):
    n, g = rng.choice(NAMES)
    p, o, P = PRONOUN[g]
    return dict(N=n, p=p, o=o, P=P)


# ----------------------------------------------------------------------------------------------------------
# arith
# ----------------------------------------------------------------------------------------------------------

FRACTIONS = {2: "half", 3: "third", 4: "quarter", 5: "fifth", 6: "sixth", 7: "seventh", 8: "eighth", 9: "ninth",
             10: "tenth"}
SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
APPLY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a // b}

# Story frames: a start sentence with {a}, step sentences per operation with {b}, questions.
ARITH_FRAMES = {
    "person": dict(
        start=["{N} has {a} {obj}.", "{N} collects {a} {obj}.", "{N} starts the day with {a} {obj}.",
               "At first, {N} owns {a} {obj}."],
        add=["{P} buys {b} more {obj}.", "{P} finds {b} more {obj}.", "A friend gives {o} {b} more {obj}.",
             "Then {p} gets {b} {obj} as a gift.", "Later {p} wins {b} more {obj}."],
        sub=["{P} gives {b} {obj} to a friend.", "{P} loses {b} {obj}.", "{P} sells {b} of the {obj}.",
             "Then {p} uses {b} of the {obj}.", "{P} gives away {b} {obj}."],
        mul=["Then {p} ends up with {b} times as many {obj} as before.",
             "The number of {obj} {p} has becomes {b} times as large."],
        div=["{P} splits the {obj} into {b} equal groups and keeps one group.",
             "{P} keeps only one {frac} of the {obj} and gives the rest away."],
        question=["How many {obj} does {N} have now?", "How many {obj} does {N} end up with?",
                  "How many {obj} does {N} have at the end?"],
    ),
    "shop": dict(
        start=["A shop has {a} {obj} in stock.", "A market stall starts the morning with {a} {obj}.",
               "The school store has {a} {obj}."],
        add=["It receives a delivery of {b} more {obj}.", "Then {b} more {obj} arrive.",
             "The owner adds {b} {obj} to the shelves."],
        sub=["It sells {b} {obj}.", "Customers buy {b} of the {obj}.", "Then {b} {obj} are sold."],
        mul=["The stock of {obj} then grows to {b} times its size.",
             "After a big order the number of {obj} is {b} times as large."],
        div=["The {obj} are packed into {b} equal crates and only one crate stays on the shelf.",
             "Only one {frac} of the {obj} is kept; the rest goes to another shop."],
        question=["How many {obj} does the shop have now?", "How many {obj} are left in stock?",
                  "How many {obj} are there at the end?"],
    ),
    "length": dict(
        start=["A {thing} is {a} {unit} long.", "{N} has a {thing} that is {a} {unit} long."],
        add=["{N} ties on another {b} {unit}.", "Then {b} {unit} are added to it."],
        sub=["{N} cuts off {b} {unit}.", "Then {b} {unit} are cut away."],
        mul=["{N} makes it {b} times as long.", "Then it is stretched to {b} times its length."],
        div=["{N} cuts it into {b} equal pieces and keeps one piece.",
             "Only one {frac} of it is kept."],
        question=["How many {unit} long is the {thing} {N} keeps now?", "How long is it now, in {unit}?"],
    ),
}
THINGS = [("rope", "metres"), ("ribbon", "centimetres"), ("wire", "metres"), ("board", "inches"),
          ("path", "feet"), ("string", "centimetres")]


def _arith_step(rng, v):
    """(op, b, new value) for one more step from value v, keeping every value in 0..999."""
    while True:
        op = rng.choices(["add", "sub", "mul", "div"], weights=[3, 3, 2, 2])[0]
        if op == "add" and v < 999:
            b = rng.randint(1, min(999 - v, rng.choice([9, 99, 999])))
            return op, b, v + b
        if op == "sub" and v >= 1:
            b = rng.randint(1, v)
            return op, b, v - b
        if op == "mul" and 1 <= v <= 499:
            b = rng.randint(2, min(12, 999 // v))
            return op, b, v * b
        if op == "div" and v >= 2:
            divs = [d for d in range(2, 11) if v % d == 0]
            if divs:
                b = rng.choice(divs)
                return op, b, v // b


def gen_arith(rng, split="train"):
    k = rng.choices([1, 2, 3], weights=[3, 4, 3])[0]
    frame_name = rng.choice(["person", "person", "shop", "length", "boxes", "share"])
    who = _person(rng)
    obj = rng.choice(OBJECTS)
    thing, unit = rng.choice(THINGS)
    fmt = dict(who, obj=obj, thing=thing, unit=unit)
    steps = []  # (op, x, b, result)
    if frame_name == "boxes":
        a = rng.randint(2, 40)
        b = rng.randint(2, min(40, 999 // a))
        first = rng.choice(["{N} has {a} boxes of {obj}. Each box holds {b} {obj}.",
                            "{N} buys {a} packs of {obj} with {b} {obj} in each pack."])
        steps.append(("mul", a, b, a * b))
        frame = ARITH_FRAMES["person"]
    elif frame_name == "share":
        b = rng.randint(2, 10)
        a = b * rng.randint(1, 999 // b)
        first = rng.choice(["{a} {obj} are shared equally among {b} children, and {N} is one of them.",
                            "{N} and {c} friends share {a} {obj} equally."])
        steps.append(("div", a, b, a // b))
        frame = ARITH_FRAMES["person"]
    else:
        frame = ARITH_FRAMES[frame_name]
        a = rng.randint(0, 999) if rng.random() < 0.15 else rng.randint(10, 999)
        b = 0
        first = rng.choice(frame["start"])
    sentences = [first.format(**fmt, a=a, b=b, c=b - 1)]
    v = steps[-1][3] if steps else a
    while len(steps) < k:
        op, b, nv = _arith_step(rng, v)
        sentences.append(rng.choice(frame[op]).format(**fmt, b=b, frac=FRACTIONS.get(b, "")))
        steps.append((op, v, b, nv))
        v = nv
    for op, x, b, r in steps:
        assert APPLY[op](x, b) == r and 0 <= r <= 999 and (op != "div" or x % b == 0), (op, x, b, r)
    problem = " ".join(sentences) + " " + rng.choice(frame["question"]).format(**fmt)
    answer = str(steps[-1][3])
    solution = "\n".join(f"{x} {SYMBOL[op]} {b} = {r}" for op, x, b, r in steps) + f"\n#### {answer}"
    key = str(steps[0][1]) + "".join(f"{SYMBOL[op]}{b}" for op, _, b, _ in steps)
    user = rng.choice(["{q}", "{q}", "Solve this problem step by step.\n{q}", "Question: {q}"]).format(q=problem)
    return dict(key=key, messages=[{"role": "user", "content": user}, {"role": "assistant", "content": solution}],
                answer=answer, meta=dict(steps=[[op, x, b, r] for op, x, b, r in steps], solution=solution))


# ----------------------------------------------------------------------------------------------------------
# mc
# ----------------------------------------------------------------------------------------------------------

LETTERS = "ABCDEFGHIJ"
COUNTRIES = [  # invented: name, capital, language, currency, flag colour
    ("Zorbania", "Quelvik", "Zorbish", "zorb", "green"), ("Talmyra", "Ostrel", "Talmic", "tala", "blue"),
    ("Veskaro", "Brindle", "Veskan", "vesk", "red"), ("Lunmark", "Harrowby", "Lunish", "lumen", "white"),
    ("Quorvia", "Maselle", "Quorvish", "quill", "yellow"), ("Drevonia", "Kettleport", "Drevic", "drev", "purple"),
    ("Palumbra", "Sorrento Vale", "Palumbric", "palm", "orange"), ("Nimbria", "Ashcombe", "Nimbrian", "nim", "black"),
    ("Ostara", "Velloran", "Ostaran", "ost", "green"), ("Krellwind", "Dunmere", "Krellic", "krel", "blue"),
    ("Ambervale", "Thistlewick", "Amberese", "amber", "red"), ("Syldora", "Marrowgate", "Syldic", "syl", "white"),
    ("Feronia", "Coldharbor", "Feronese", "fern", "yellow"), ("Gallowmere", "Pennrith", "Gallic", "gall", "purple"),
    ("Heskara", "Wendlebury", "Heskari", "hesk", "orange"), ("Istrova", "Larkspur", "Istrovan", "istra", "black"),
    ("Jorvik Isles", "Saltmarsh", "Jorvish", "jorv", "green"), ("Kalindra", "Brightwater", "Kalindri", "kal", "blue"),
    ("Myrrhdale", "Oakhollow", "Myrrhic", "myrr", "red"), ("Norwick", "Stonebridge", "Norwegic", "norr", "white"),
]
CREATURES = [  # invented animals: name, colour, food, home
    ("glimmerfox", "silver", "berries", "forest"), ("snorvel", "brown", "roots", "swamp"),
    ("pellicat", "orange", "fish", "coast"), ("drumbleback", "grey", "leaves", "hills"),
    ("quillop", "blue", "insects", "meadow"), ("marrowhawk", "black", "mice", "mountains"),
    ("tundrik", "white", "lichen", "tundra"), ("fennelope", "yellow", "grass", "plains"),
    ("brisket owl", "red", "moths", "desert"), ("lumosnail", "green", "moss", "caves"),
    ("vorpal crab", "purple", "algae", "reef"), ("honeybadger moth", "gold", "nectar", "garden"),
]
CONVERSIONS = [("metres", "centimetres", 100), ("kilometres", "metres", 1000), ("hours", "minutes", 60),
               ("minutes", "seconds", 60), ("kilograms", "grams", 1000), ("weeks", "days", 7),
               ("days", "hours", 24), ("years", "months", 12), ("litres", "millilitres", 1000),
               ("dozens", "items", 12), ("feet", "inches", 12)]
MC_INSTRUCTIONS = ["Answer with the letter of the correct option.", "Reply with the letter only.",
                   "Choose the correct option.", "Pick one letter."]


def _mc_numbers(rng, n):
    kind = rng.choice(["largest", "smallest", "even", "odd", "multiple"])
    if kind in ("largest", "smallest"):
        opts = rng.sample(range(0, 1000), n)
        correct = max(opts) if kind == "largest" else min(opts)
        q = f"Which of these numbers is the {kind}?"
        why = f"The {kind} number is {correct}."
    elif kind in ("even", "odd"):
        want = 0 if kind == "even" else 1
        correct = rng.randrange(want, 1000, 2)
        others = rng.sample([x for x in range(1 - want, 1000, 2)], n - 1)
        opts = others + [correct]
        q = f"Which of these numbers is {kind}?"
        why = f"{correct} ends in {correct % 10}, so it is {kind}."
    else:
        m = rng.choice([3, 5, 7, 9, 11])
        correct = m * rng.randint(1, 999 // m)
        pool = [x for x in range(1, 1000) if x % m]
        opts = rng.sample(pool, n - 1) + [correct]
        q = f"Which of these numbers is a multiple of {m}?"
        why = f"{m} * {correct // m} = {correct}."
    return q, [str(x) for x in opts], str(correct), why


def _mc_conversion(rng, n):
    big, small, f = rng.choice(CONVERSIONS)
    x = rng.randint(1, 20)
    correct = x * f
    cands = {x * f * 10, x * f // 10 if x * f % 10 == 0 else x * f + 1, x + f, x * f + f, x * f - f, x * (f + 1),
             x * (f - 1), (x + 1) * f, abs(x - 1) * f, x * f * 2}
    extra = rng.sample(range(1, 20001), 40)
    cands = [c for c in list(cands) + extra if c != correct and c > 0]
    seen, opts = set(), []
    for c in cands:
        if c not in seen:
            seen.add(c)
            opts.append(c)
    opts = opts[:n - 1] + [correct]
    q = rng.choice([f"How many {small} are in {x} {big}?", f"{x} {big} is how many {small}?"])
    one = "foot" if big == "feet" else big[:-1]
    why = f"One {one} is {f} {small}, and {x} * {f} = {correct}."
    return q, [str(c) for c in opts], str(correct), why


def _mc_kb(rng, n):
    if rng.random() < 0.6:
        c = rng.choice(COUNTRIES)
        attr = rng.choice([(1, "What is the capital of {}?"), (2, "Which language is spoken in {}?"),
                           (3, "What is the currency of {}?"), (0, "Which country has the capital {}?")])
        if attr[0] == 0:
            q, correct, pool = attr[1].format(c[1]), c[0], [x[0] for x in COUNTRIES]
        else:
            q, correct, pool = attr[1].format(c[0]), c[attr[0]], [x[attr[0]] for x in COUNTRIES]
        why = {0: f"{c[1]} is the capital of {c[0]}.", 1: f"The capital of {c[0]} is {c[1]}.",
               2: f"People in {c[0]} speak {c[2]}.", 3: f"The currency of {c[0]} is the {c[3]}."}[attr[0]]
    else:
        c = rng.choice(CREATURES)
        j, tmpl = rng.choice([(1, "What colour is the {}?"), (2, "What does the {} eat?"), (3, "Where does the {} live?")])
        q, correct, pool = tmpl.format(c[0]), c[j], sorted({x[j] for x in CREATURES})
        why = (f"The {c[0]} is {c[1]}.", f"The {c[0]} eats {c[2]}.", f"The {c[0]} lives in the {c[3]}.")[j - 1]
    others = [x for x in dict.fromkeys(pool) if x != correct]
    n = min(n, len(others) + 1)
    return q, rng.sample(others, n - 1) + [correct], correct, why


def gen_mc(rng, split="train", drills=True):
    n = rng.randint(4, 10)
    kind = rng.choices(["numbers", "conversion", "kb"], weights=[3, 3, 4])[0]
    q, opts, correct, why = {"numbers": _mc_numbers, "conversion": _mc_conversion, "kb": _mc_kb}[kind](rng, n)
    rng.shuffle(opts)
    letter = LETTERS[opts.index(correct)]
    lines = [f"{LETTERS[i]}. {o}" for i, o in enumerate(opts)]
    key = q + "|" + "|".join(sorted(opts))
    if drills and split == "train" and rng.random() < 0.25:
        return _mc_letter_drill(rng, key, opts, lines)
    user = rng.choice(["{q}\n{o}\n{i}", "Question: {q}\n{o}\n{i}", "{i}\n{q}\n{o}"]).format(
        q=q, o="\n".join(lines), i=rng.choice(MC_INSTRUCTIONS))
    # The reasoning states the fact or computation that decides the answer, then which option holds it: the letter
    # becomes a lookup in the prompt instead of a fact, a computation and a lookup in one token.
    reasoning = f"{why} {correct} is option {letter}."
    return dict(key=key, messages=[{"role": "user", "content": user},
                                   {"role": "assistant", "content": f"Answer: {letter}", "reasoning_content": reasoning}],
                answer=letter, meta=dict(kind=kind, options=opts, correct=correct))


def _mc_letter_drill(rng, key, opts, lines):
    """A quarter of the multiple-choice training items: the options of a question and, instead of the question,
    several values to find among them, each answered with the sentence that ends mc's reasoning ("105 is option
    C."). Rounds 1-2 named the deciding value right in 42 of 50 held-out items but its letter in 8: the lookup of a
    value's letter in the prompt is what this drills (the retrieval drill's counterpart). The item keeps its
    question's key, so no drill shows the options of a held-out question."""
    asked = rng.sample(range(len(opts)), rng.randint(2, len(opts)))
    values = [opts[i] for i in asked]
    user = "\n".join(lines) + "\nWhich options hold " + ", ".join(values[:-1]) + f" and {values[-1]}?"
    answer = "\n".join(f"{opts[i]} is option {LETTERS[i]}." for i in asked)
    return dict(key=key, messages=[{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
                answer=answer, meta=dict(kind="letter-drill", options=opts, asked=values))


# ----------------------------------------------------------------------------------------------------------
# retrieval
# ----------------------------------------------------------------------------------------------------------

UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# The key always follows a space (in the lines and in the question), so it is spelled with the same tokens.
RETRIEVAL_LINES = ["The code of {k} is {v}.", "The code for {k} is {v}.", "Code of {k}: {v}."]


RETRIEVAL_TRAIN_RANGES = [(48, 256), (256, 1024), (1024, 2048), (2048, 4096)]


def retrieval_train_length(rng, max_tokens=None):
    """Context length in tokens for a training item: a dense curriculum below index_topk, then up to 4096.
    max_tokens (train.py --retrieval-max-tokens, for experiments) keeps the ranges that start below it, cut at it."""
    ranges, weights = RETRIEVAL_TRAIN_RANGES, [4, 3, 2, 1]
    if max_tokens is not None:
        keep = [i for i, (lo, _) in enumerate(ranges) if lo < max_tokens]
        ranges, weights = [(ranges[i][0], min(ranges[i][1], max_tokens)) for i in keep], [weights[i] for i in keep]
    lo, hi = rng.choices(ranges, weights=weights)[0]
    return rng.randint(lo, hi)


def gen_retrieval(rng, split="train", tokens=None, drills=True, max_tokens=None, one_question=False):
    if tokens is None:
        tokens = retrieval_train_length(rng, max_tokens) if split == "train" else rng.choice(RETRIEVAL_HELDOUT_LENGTHS)
    n = max(3, int((tokens - RETRIEVAL_OVERHEAD_TOKENS) / RETRIEVAL_TOKENS_PER_LINE))
    keys = set()
    while len(keys) < n:
        keys.add("".join(rng.choice(UPPER) for _ in range(3)) + f"-{rng.randint(10, 99)}")
    keys = sorted(keys)
    rng.shuffle(keys)
    vals = [rng.randint(1000, 9999) for _ in keys]
    lines = [rng.choice(RETRIEVAL_LINES).format(k=k, v=v) for k, v in zip(keys, vals)]
    j = rng.randrange(n)
    head = rng.choice(["Here is a list of codes.", "Read the list of codes below.", "Codes:"])
    q = rng.choice(["What is the code of {k}?", "What is the code for {k}?", "Tell me the code of {k}."]).format(k=keys[j])
    ask = [j]
    # Training items mostly ask for several codes: more supervised lookups per context is what teaches the copy
    # (held-out items ask one). extra 1 or 2: 2 or 3 codes, comma-separated. extra 3, 5 or 7 (with drills): a drill
    # of up to 32 keys (fewer near 4096 tokens) answered one "KEY: CODE" line each, so that every code is looked up
    # by the key just written, as the one-key question puts its key just before the answer: the multi-query
    # associative recall drill that small models learn lookup from (rounds 1-2 asked at most 8 codes,
    # comma-separated, and never learnt it).
    # Without drills (the tokenizer corpus) extra codes are always comma-separated, as in rounds 1-2.
    # one_question (train.py --retrieval-one-question): training items ask one code, as the held-out items do
    extra = rng.choice([0, 0, 1, 2, 3, 5, 7]) if split == "train" and not one_question else 0
    form = "one" if not extra else "drill" if drills and extra >= 3 else "some"
    if form == "drill":
        # the drill's question and answer lines (about 20 tokens a key) must fit the longest bucket (4160 tokens)
        extra = min(rng.randint(7, 31), max(2, (3950 - tokens) // 20))
    if extra:
        ask += rng.sample([i for i in range(n) if i != j], min(extra, n - 1))
    if form == "drill":
        q = "List the codes of " + ", ".join(keys[i] for i in ask[:-1]) + f" and {keys[ask[-1]]}."
        tail = " Answer with one line per key: the key, a colon and its code."
        answer = "\n".join(f"{keys[i]}: {vals[i]}" for i in ask)
    elif form == "some":
        q = "What are the codes of " + ", ".join(keys[i] for i in ask[:-1]) + f" and {keys[ask[-1]]}?"
        tail = " Answer with the numbers only, in this order, separated by commas."
        answer = ", ".join(str(vals[i]) for i in ask)
    else:
        tail = " Answer with the number only."
        answer = str(vals[j])
    user = head + "\n" + "\n".join(lines) + "\n" + q + tail
    key = hashlib.sha1(user.encode()).hexdigest()
    return dict(key=key, messages=[{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
                answer=answer, meta=dict(lines=n, position=j, positions=ask, query=keys[j], target_tokens=tokens,
                                         form=form))


# ----------------------------------------------------------------------------------------------------------
# tools
# ----------------------------------------------------------------------------------------------------------

def _fn(name, description, props, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}


TOOLS = {
    "get_weather": _fn("get_weather", "Get the current weather in a city.",
                       {"city": {"type": "string", "description": "City name"}}, ["city"]),
    "convert_currency": _fn("convert_currency", "Convert an amount of money from one currency to another.",
                            {"amount": {"type": "integer"}, "from_currency": {"type": "string"},
                             "to_currency": {"type": "string"}}, ["amount", "from_currency", "to_currency"]),
    "get_time": _fn("get_time", "Get the local time in a city.", {"city": {"type": "string"}}, ["city"]),
    "set_timer": _fn("set_timer", "Start a countdown timer.",
                     {"minutes": {"type": "integer", "description": "Length of the timer"}}, ["minutes"]),
    "send_email": _fn("send_email", "Send a short email.",
                      {"to": {"type": "string"}, "subject": {"type": "string"}}, ["to", "subject"]),
    "get_stock_price": _fn("get_stock_price", "Get the latest price of a stock.",
                           {"symbol": {"type": "string", "description": "Ticker symbol"}}, ["symbol"]),
    "translate": _fn("translate", "Translate a word into another language.",
                     {"word": {"type": "string"}, "language": {"type": "string"}}, ["word", "language"]),
    "find_recipe": _fn("find_recipe", "Find a recipe that uses an ingredient.",
                       {"ingredient": {"type": "string"}, "max_minutes": {"type": "integer"}},
                       ["ingredient", "max_minutes"]),
}
CITIES = ["Paris", "Tokyo", "Lima", "Cairo", "Oslo", "Delhi", "Toronto", "Nairobi", "Madrid", "Seoul", "Quito",
          "Dublin", "Hanoi", "Perth", "Lagos", "Vienna", "Bogota", "Athens", "Manila", "Denver", "Riga", "Tunis"]
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "INR", "CAD", "BRL", "CHF", "KRW", "MXN"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy"]
STOCKS = ["ACME", "BOLT", "CRUX", "DYNA", "EVRG", "FLUX", "GLOW", "HIVE", "IONX", "JUNO"]
WORDS = ["apple", "house", "river", "friend", "book", "window", "bread", "music", "garden", "light"]
LANGUAGES = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch"]
TRANSLATIONS = {"French": "le mot", "Spanish": "la palabra", "German": "das Wort", "Italian": "la parola",
                "Portuguese": "a palavra", "Dutch": "het woord"}
INGREDIENTS = ["rice", "eggs", "beans", "spinach", "tomatoes", "lentils", "mushrooms", "potatoes"]
CONTACTS = ["anna@example.com", "bo@example.com", "chen@example.com", "dev@example.com", "eli@example.com"]
SUBJECTS = ["Meeting tomorrow", "Lunch plans", "Project update", "Happy birthday", "Quick question"]


def _tool_case(rng, name):
    """(user request, arguments, intent, tool result, final answer) for one call of tool `name`."""
    if name == "get_weather":
        c = rng.choice(CITIES)
        t, cond = rng.randint(-10, 35), rng.choice(CONDITIONS)
        return (rng.choice([f"What is the weather like in {c}?", f"How is the weather in {c} right now?",
                            f"Is it warm in {c} today?"]), {"city": c}, f"the weather in {c}",
                f"{t} C, {cond}", f"It is {t} C and {cond} in {c}.")
    if name == "convert_currency":
        a, f, t = rng.randint(1, 999), *rng.sample(CURRENCIES, 2)
        res = rng.randint(1, 99999)
        return (rng.choice([f"Convert {a} {f} to {t}.", f"How much is {a} {f} in {t}?"]),
                {"amount": a, "from_currency": f, "to_currency": t}, f"{a} {f} converted to {t}",
                f"{a} {f} = {res} {t}", f"{a} {f} is {res} {t}.")
    if name == "get_time":
        c = rng.choice(CITIES)
        hh, mm = rng.randint(0, 23), rng.randint(0, 59)
        return (rng.choice([f"What time is it in {c}?", f"Tell me the local time in {c}."]), {"city": c},
                f"the local time in {c}", f"{hh:02d}:{mm:02d}", f"It is {hh:02d}:{mm:02d} in {c}.")
    if name == "set_timer":
        m = rng.randint(1, 120)
        return (rng.choice([f"Set a timer for {m} minutes.", f"Please start a {m} minute timer."]), {"minutes": m},
                f"a timer of {m} minutes", f"timer set for {m} minutes", f"Your timer for {m} minutes is running.")
    if name == "send_email":
        to, s = rng.choice(CONTACTS), rng.choice(SUBJECTS)
        return (f"Send an email to {to} with the subject \"{s}\".", {"to": to, "subject": s},
                f"an email to {to}", "sent", f"I sent the email to {to}.")
    if name == "get_stock_price":
        s = rng.choice(STOCKS)
        p = rng.randint(5, 900)
        return (rng.choice([f"What is the stock price of {s}?", f"How much does one share of {s} cost?"]),
                {"symbol": s}, f"the price of {s}", f"{s}: {p} USD", f"One share of {s} costs {p} USD.")
    if name == "translate":
        w, lang = rng.choice(WORDS), rng.choice(LANGUAGES)
        return (rng.choice([f"Translate the word {w} into {lang}.", f"How do you say {w} in {lang}?"]),
                {"word": w, "language": lang}, f"the word {w} in {lang}", f"{w} -> {TRANSLATIONS[lang]} {w}",
                f"In {lang}, {w} is \"{TRANSLATIONS[lang]} {w}\".")
    if name == "find_recipe":
        ing, m = rng.choice(INGREDIENTS), rng.choice([10, 15, 20, 30, 45, 60])
        dish = f"{ing} {rng.choice(['soup', 'salad', 'stew', 'bowl', 'pie'])}"
        return (f"Find me a recipe with {ing} that takes at most {m} minutes.", {"ingredient": ing, "max_minutes": m},
                f"a recipe with {ing} in {m} minutes", f"{dish}, {m} minutes", f"You could make {dish} in {m} minutes.")
    raise KeyError(name)


def gen_tools(rng, split="train"):
    names = rng.sample(sorted(TOOLS), rng.randint(2, 4))
    tools = [TOOLS[n] for n in names]
    mode = rng.choices(["call", "answer", "none"], weights=[4, 4, 2])[0]
    if mode == "none":
        a, b = rng.randint(0, 500), rng.randint(0, 499)
        op = rng.choice(["plus", "minus"]) if a >= b else "plus"
        c = a + b if op == "plus" else a - b
        user = rng.choice([f"What is {a} {op} {b}?", f"Quick question: what is {a} {op} {b}?"])
        reasoning = (f"This is simple arithmetic and none of the tools is needed. "
                     f"{a} {'+' if op == 'plus' else '-'} {b} = {c}.")
        final = f"{a} {op} {b} is {c}."
        msgs = [{"role": "user", "content": user},
                {"role": "assistant", "content": final, "reasoning_content": reasoning}]
        return dict(key=f"none|{a}{op}{b}|{','.join(names)}", messages=msgs, tools=tools, answer=final,
                    meta=dict(mode=mode, answer_type="text", value=c))
    name = rng.choice(names)
    user, args, intent, result, final = _tool_case(rng, name)
    arg_text = ", ".join(f"{k} {v}" for k, v in args.items())
    reasoning1 = f"The user wants {intent}. The {name} tool does this, so I call it with {arg_text}."
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}
    msgs = [{"role": "user", "content": user},
            {"role": "assistant", "content": "", "reasoning_content": reasoning1, "tool_calls": [call]}]
    key = f"{name}|" + json.dumps(args, sort_keys=True)
    if mode == "call":
        return dict(key=key + "|call", messages=msgs, tools=tools,
                    answer={"name": name, "arguments": args}, meta=dict(mode=mode, answer_type="tool_call"))
    msgs.append({"role": "tool", "tool_call_id": "call_1", "content": result})
    msgs.append({"role": "assistant", "content": final,
                 "reasoning_content": f"The tool returned {result}. I can answer now."})
    return dict(key=key + f"|answer|{result}", messages=msgs, tools=tools, answer=final,
                meta=dict(mode=mode, answer_type="text", tool_result=result))


# ----------------------------------------------------------------------------------------------------------
# vision
# ----------------------------------------------------------------------------------------------------------

COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (50, 90, 230), "yellow": (235, 215, 40),
           "purple": (150, 60, 200), "orange": (245, 140, 30), "white": (240, 240, 240)}
BACKGROUNDS = [(0, 0, 0), (40, 40, 40), (25, 30, 50)]
SHAPES = ("square", "circle", "triangle")
QUADRANT = {(0, 0): "top left", (0, 1): "top right", (1, 0): "bottom left", (1, 1): "bottom right"}


def draw_scene(scene):
    """scene dict (background, objects: [{shape, colour, cell, size, dx, dy}]) -> RGB bytes, 112x112."""
    W = IMAGE_SIZE
    img = bytearray(bytes(scene["background"]) * (W * W))
    for ob in scene["objects"]:
        r, c = divmod(ob["cell"], 4)
        cx, cy = c * CELL + CELL // 2 + ob["dx"], r * CELL + CELL // 2 + ob["dy"]
        h = ob["size"] // 2
        col = bytes(COLOURS[ob["colour"]])
        for y in range(cy - h, cy + h + 1):
            for x in range(cx - h, cx + h + 1):
                if ob["shape"] == "square":
                    inside = True
                elif ob["shape"] == "circle":
                    inside = (x - cx) ** 2 + (y - cy) ** 2 <= h * h
                else:  # triangle, apex up: width grows linearly from the top row to the bottom row
                    half = (y - (cy - h)) / 2.0
                    inside = abs(x - cx) <= half
                if inside and 0 <= x < W and 0 <= y < W:
                    i = (y * W + x) * 3
                    img[i:i + 3] = col
    return bytes(img)


def cell_quadrant(cell):
    """The quadrant ("top left", ...) of a cell of the 4 x 4 grid (row-major, 0..15)."""
    r, c = divmod(cell, 4)
    return QUADRANT[(r // 2, c // 2)]


def _object(rng, cell, shape=None, colour=None, background=None):
    colours = [k for k in COLOURS if not (background == (0, 0, 0) and k == "black")]
    return dict(shape=shape or rng.choice(SHAPES), colour=colour or rng.choice(colours), cell=cell,
                size=rng.randint(14, 22), dx=rng.randint(-2, 2), dy=rng.randint(-2, 2))


def gen_vision(rng, split="train"):
    bg = list(rng.choice(BACKGROUNDS))
    kind = rng.choice(["count", "colour", "shape", "position"])
    if kind == "count":
        n = rng.randint(1, 5)
        cells = rng.sample(range(16), n)
        same = rng.random() < 0.5
        shape, colour = rng.choice(SHAPES), rng.choice(list(COLOURS))
        objs = [_object(rng, c, shape if same else None, colour if same else None) for c in cells]
        q = rng.choice(["How many shapes are in the picture?", "How many objects can you see?",
                        "Count the shapes in the image."])
        ans = str(n)
    else:
        cell = rng.randrange(16)
        objs = [_object(rng, cell)]
        ob = objs[0]
        if kind == "colour":
            q, ans = rng.choice([f"What colour is the {ob['shape']}?", "What colour is the shape?"]), ob["colour"]
        elif kind == "shape":
            q, ans = rng.choice(["What shape is in the picture?", f"What is the {ob['colour']} shape?"]), ob["shape"]
        else:
            q, ans = f"Where is the {ob['colour']} {ob['shape']}?", cell_quadrant(cell)
    q = q + rng.choice([" Answer with one word.", " Answer briefly.", ""]) if kind != "position" else q + " Answer like \"top left\"."
    scene = dict(background=bg, objects=objs)
    # The reasoning describes every object in reading order (colour, shape, quadrant) before the answer: each
    # picture then teaches every attribute of every object, not only the one asked about.
    # Reading order is the order of the image tokens (one per 28-pixel cell, row by row), numbered so that a count
    # is the last number.
    reasoning = " ".join(f"Shape {i} is {'an' if ob['colour'][0] in 'aeiou' else 'a'} {ob['colour']} {ob['shape']} "
                         f"at the {cell_quadrant(ob['cell'])}."
                         for i, ob in enumerate(sorted(objs, key=lambda ob: ob["cell"]), 1))
    if kind == "count":
        reasoning += f" That is {n} shape{'s' if n > 1 else ''}."
    key = json.dumps(scene, sort_keys=True) + "|" + q
    content = [{"type": "image_url", "image_url": {"url": "IMAGE"}}, {"type": "text", "text": q}]
    return dict(key=key, messages=[{"role": "user", "content": content},
                                   {"role": "assistant", "content": ans, "reasoning_content": reasoning}],
                answer=ans, meta=dict(kind=kind, scene=scene, width=IMAGE_SIZE, height=IMAGE_SIZE))


GENERATORS = {"arith": gen_arith, "mc": gen_mc, "retrieval": gen_retrieval, "tools": gen_tools,
              "vision": gen_vision}


# ----------------------------------------------------------------------------------------------------------
# Rendering for training: text + the character spans the loss is computed on
# ----------------------------------------------------------------------------------------------------------

END_OF_TURN = {"tool_call": "<|observation|>", "final": "<|endoftext|>"}


def training_text(item, render=None):
    """(text, spans): the whole conversation rendered with the chat template (no generation prompt) plus the
    last turn's end-of-turn token, and the [start, end) character spans the model is trained on: each assistant turn from
    after its "<|assistant|><think>" through its end-of-turn token ("<|observation|>" after tool calls,
    "<|endoftext|>" after a final answer). Every span starts after an added token and ends with one, so tokenizing
    the pieces separately gives the same ids as tokenizing the whole text."""
    render = render or chat.render
    last = item["messages"][-1]
    end = END_OF_TURN["tool_call" if last.get("tool_calls") else "final"]
    text = render(item["messages"], item.get("tools"), add_generation_prompt=False) + end
    opener = "<|assistant|><think>"
    spans, pos = [], 0
    while True:
        i = text.find(opener, pos)
        if i < 0:
            break
        start = i + len(opener)
        ends = [(text.find(m, start), m) for m in MARKERS]
        ends = [(j, m) for j, m in ends if j >= 0]
        j, m = min(ends)
        if m not in ("<|observation|>", "<|endoftext|>"):
            raise ValueError(f"{item['id']}: an assistant turn ends with {m}, not an end-of-turn token")
        spans.append((start, j + len(m)))
        pos = j
    if not spans:
        raise ValueError(f"{item['id']}: no assistant turn in the rendered text")
    return text, spans


def check_markers(item):
    """Generated text must not contain the template's special strings (the spans are found by them)."""
    def texts(v):
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for x in v.values():
                yield from texts(x)
        elif isinstance(v, list):
            for x in v:
                yield from texts(x)
    for s in texts(item["messages"]):
        for m in MARKERS + ("<think>", "</think>", "<tool_call>", "<|image|>"):
            if m in s:
                raise ValueError(f"{item['id']}: generated text contains {m}")


def prompt_messages(item):
    """The eval prompt: the conversation up to (without) its last assistant turn."""
    assert item["messages"][-1]["role"] == "assistant"
    return item["messages"][:-1]


# ----------------------------------------------------------------------------------------------------------
# Held-out sets for the eval tasks
# ----------------------------------------------------------------------------------------------------------

def eval_record(item, image_path=None):
    msgs = json.loads(json.dumps(prompt_messages(item)))
    rec = dict(id=item["id"].replace("-heldout-", "-"), family=item["family"], messages=msgs, answer=item["answer"])
    if item.get("tools"):
        rec["tools"] = item["tools"]
    m = item["meta"]
    if item["family"] == "arith":
        rec["solution"] = m["solution"]
    elif item["family"] == "mc":
        rec["options"] = m["options"]
    elif item["family"] == "retrieval":
        rec["meta"] = dict(lines=m["lines"], position=m["position"], context_tokens_approx=m["target_tokens"])
    elif item["family"] == "tools":
        rec["answer_type"] = m["answer_type"]
    elif item["family"] == "vision":
        rec["images"] = [image_path]
        for part in rec["messages"][0]["content"]:
            if part.get("type") == "image_url":
                part["image_url"]["url"] = image_path
        rec["meta"] = dict(kind=m["kind"])
    return rec


def heldout_items(family, n, seed=DEFAULT_SEED):
    if family == "retrieval":  # the same number of items at each length
        L = RETRIEVAL_HELDOUT_LENGTHS
        return [make_item(family, "heldout", i, seed, tokens=L[i % len(L)]) for i in range(n)]
    return [make_item(family, "heldout", i, seed) for i in range(n)]


def write_evals(out, n, seed=DEFAULT_SEED, families=FAMILIES, retrieval_n=None):
    os.makedirs(out, exist_ok=True)
    counts = {}
    for fam in families:
        k = retrieval_n if (fam == "retrieval" and retrieval_n) else n
        items = heldout_items(fam, k, seed)
        path = os.path.join(out, f"{fam}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for it in items:
                check_markers(it)
                img = None
                if fam == "vision":
                    img = f"images/{it['id'].replace('-heldout-', '-')}.png"
                    os.makedirs(os.path.join(out, "images"), exist_ok=True)
                    png.write_rgb(os.path.join(out, img), IMAGE_SIZE, IMAGE_SIZE, draw_scene(it["meta"]["scene"]))
                f.write(json.dumps(eval_record(it, img), ensure_ascii=False) + "\n")
        counts[fam] = len(items)
    return counts


CORPUS_ITEMS = dict(arith=6000, mc=4000, retrieval=300, tools=1500, vision=3000)
# generator options of the corpus items: short retrieval items, and no drills (the corpus of rounds 1-2)
CORPUS_OPTS = dict(retrieval={"tokens": 128, "drills": False}, mc={"drills": False})


def write_corpus(path, scale=1.0, seed=DEFAULT_SEED):
    """Tokenizer training text: rendered training conversations (added tokens included; the trainer cuts the text
    at them, as HF does). Few retrieval items, and short ones: their random keys and codes would otherwise spend
    the merges on key spellings seen once."""
    with open(path, "w", encoding="utf-8") as f:
        for fam in FAMILIES:
            for i in range(int(CORPUS_ITEMS[fam] * scale)):
                it = make_item(fam, "train", i, seed, **CORPUS_OPTS.get(fam, {}))
                text, _ = training_text(it, chat.render_python)
                f.write(text + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("evals", help="write the held-out sets (evals/data/tiny/<family>.jsonl)")
    e.add_argument("--out", default=os.path.join(ROOT, "evals", "data", "tiny"))
    e.add_argument("--n", type=int, default=300)
    e.add_argument("--retrieval-n", type=int, default=200)
    e.add_argument("--seed", type=int, default=DEFAULT_SEED)
    c = sub.add_parser("corpus", help="write the tokenizer training text")
    c.add_argument("--out", required=True)
    c.add_argument("--scale", type=float, default=1.0, help="times CORPUS_ITEMS items per family")
    c.add_argument("--seed", type=int, default=DEFAULT_SEED)
    s = sub.add_parser("sample", help="print rendered items")
    s.add_argument("--family", choices=FAMILIES, required=True)
    s.add_argument("--split", default="train", choices=["train", "heldout"])
    s.add_argument("--n", type=int, default=3)
    s.add_argument("--seed", type=int, default=DEFAULT_SEED)
    a = ap.parse_args(argv)
    if a.cmd == "evals":
        print(json.dumps(write_evals(a.out, a.n, a.seed, retrieval_n=a.retrieval_n)))
    elif a.cmd == "corpus":
        write_corpus(a.out, a.scale, a.seed)
        print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes)")
    else:
        for i in range(a.n):
            it = make_item(a.family, a.split, i, a.seed)
            text, spans = training_text(it)
            print(f"=== {it['id']} key={it['key'][:60]!r} answer={it['answer']!r}")
            print(text)
            print("--- trained:", [text[s:e] for s, e in spans])
    return 0


if __name__ == "__main__":
    sys.exit(main())
