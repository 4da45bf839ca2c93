"""Human labels for calibrating an LLM judge on the sample suite (`dossier eval calibrate-judge --judge MODEL`).

Each item is a sample-suite question (`dossier sample`), its accepted answers, an answer that
MADQA's two-stage scoring sends to the judge (none is an exact match), and the verdict a
Dossier engineer gave it by MADQA's rubric (`engine.eval.judge.RUBRIC`): correct, partial or
incorrect. The first 18 answers are real outputs of `--model qwen2.5-1.5b --quantization int8`
with the bm25 agent on the sample suite (2026-12-01); the others were written to cover what the
rubric accepts (a unit or scale, a qualifier, another date format, a short sentence) and what it
rejects (a wrong scale, a preamble, the other item of a comparison). The labels were fixed
before any judge was run on them.
"""

from __future__ import annotations

__all__ = ["SAMPLE_JUDGE_LABELS"]

_Q = {
    "s01": ("What was Northwind Cooperative's revenue in 2023 (in thousands of US dollars)?", [["$48,250"], ["48,250"], ["48250"]]),
    "s02": ("What was Northwind Cooperative's net income in 2022 according to the 2023 annual report?", [["$3,905"], ["3,905"]]),
    "s03": ("How much did Northwind spend on capital expenditure in 2023?", [["$2,740"], ["2,740"]]),
    "s04": ("How many active members did Northwind's online shop reach in 2023?", [["41,000"]]),
    "s05": ("Which segment contributed most of Northwind's revenue in 2023?", [["Retail stores"], ["Retail"]]),
    "s06": ("Who signed the letter from the Chief Executive in the 2023 annual report?", [["Helen Marsh"]]),
    "s07": ("What was Northwind's operating income in 2021?", [["$5,120"], ["5,120"]]),
    "s08": ("By how much did Northwind's revenue grow from 2021 to 2023, in thousands of US dollars?", [["6,150"], ["$6,150"]]),
    "s09": ("Which risk did the 2022 annual report name as the main one for the next year?", [["Fuel prices"], ["rising fuel prices"]]),
    "s10": ("What is the member ID on the Greenfield Library membership application?", [["GL-20417"]]),
    "s11": ("Which membership plan did Amelia R. Okafor choose?", [["Family"]]),
    "s12": ("What monthly fee is stated on the library membership form?", [["$12.50"], ["12.50"]]),
    "s13": ("How much does the spaghetti with clams cost at Harbor Cafe?", [["$18.00"], ["$18"]]),
    "s14": ("What is the price of a cold brew at Harbor Cafe?", [["$4.50"]]),
    "s15": ("Which is more expensive at Harbor Cafe: the harbor chowder or the sea-salt hot chocolate?", [["Harbor chowder"], ["The harbor chowder"]]),
    "s16": ("Where will the Eastgate warehouse move to?", [["Riverside Logistics Park"]]),
    "s17": ("On what date do operations resume at the new warehouse site?", [["18 November 2024"]]),
    "s18": ("How many days pass between the start of packing and the resumption of operations in the relocation memo?", [["14"], ["14 days"]]),
    "s19": ("On which street will water service be interrupted for maintenance?", [["Harbor Street"]]),
    "s20": ("Who sent the memo about the warehouse relocation?", [["Daniel Reyes"]]),
}

_LABELLED = (
    # real outputs of qwen2.5-1.5b (int8) on the sample suite
    ("s15", ["The harbor chowder is more expensive at Harbor Cafe."], "correct"),
    ("s16", ["The Eastgate warehouse will move to the Westgate warehouse."], "incorrect"),
    ("s08", ["Northwind's revenue grew by 100,000 US dollars from 2021 to 2023."], "incorrect"),
    ("s01", ["Northwind Cooperative's revenue in 2023 was $1,200,000,000 (in thousands of US dollars)."], "incorrect"),
    ("s19", ["Water service will be interrupted for maintenance on 12th Street."], "incorrect"),
    ("s12", ["The monthly fee stated on the library membership form is $10."], "incorrect"),
    ("s14", ["The price of a cold brew at Harbor Cafe is $3.50."], "incorrect"),
    ("s13", ["$12.99"], "incorrect"),
    ("s17", ["The operations resume on January 1, 2023."], "incorrect"),
    ("s05", ["Northwind's revenue in 2023 was contributed by the Beverages segment."], "incorrect"),
    ("s07", ["Northwind's operating income in 2021 was $100 million."], "incorrect"),
    ("s03", ["Net income is shown after taxes. Capital expenditure covers the purchase of property, plant and",
             "equipment."], "incorrect"),
    ("s06", ["The letter from the Chief Executive in the 2023 annual report was signed by the CEO."], "incorrect"),
    ("s09", ["The 2022 annual report named the main risk as the risk of inflation for the next year."], "incorrect"),
    ("s04", ["100,000"], "incorrect"),
    ("s02", ["Northwind Cooperative's net income in 2022 according to the 2023 annual report was $100 million."],
     "incorrect"),
    ("s18", ["10 days"], "incorrect"),
    ("s20", ["The memo about the warehouse relocation was sent by the company's IT department."], "incorrect"),
    # written to cover what the rubric accepts
    ("s16", ["Riverside Logistics Park, the new site"], "correct"),
    ("s08", ["$6,150 thousand"], "correct"),
    ("s01", ["48,250 thousand US dollars"], "correct"),
    ("s19", ["Harbor St."], "correct"),
    ("s12", ["$12.50 per month"], "correct"),
    ("s14", ["4.50 dollars"], "correct"),
    ("s13", ["18 dollars"], "correct"),
    ("s17", ["November 18, 2024"], "correct"),
    ("s05", ["The retail stores segment"], "correct"),
    ("s07", ["5,120 (thousands of US dollars)"], "correct"),
    ("s06", ["Helen Marsh, Chief Executive"], "correct"),
    ("s09", ["Rising fuel prices were named the main risk."], "correct"),
    ("s04", ["about 41,000 active members"], "correct"),
    ("s20", ["Daniel Reyes, who signed the memo"], "correct"),
    ("s18", ["Fourteen days"], "correct"),
    ("s02", ["Net income for 2022 was $3,905 thousand."], "correct"),
    ("s11", ["the Family plan"], "correct"),
    ("s10", ["member ID GL-20417"], "correct"),
    ("s13", ["$18.00 for the spaghetti with clams; the harbor chowder is $9.50"], "partial"),
    # ... and what it rejects
    ("s03", ["2,740 million"], "incorrect"),
    ("s07", ["5,120 million dollars"], "incorrect"),
    ("s15", ["The sea-salt hot chocolate"], "incorrect"),
    ("s18", ["Based on the memo, packing starts on 4 November and operations resume on 18 November, so 14 days pass "
             "between them; this is the whole relocation period described in the memo."], "incorrect"),
)

SAMPLE_JUDGE_LABELS: tuple[dict, ...] = tuple(
    {"id": f"{qid}-{n}", "question": _Q[qid][0], "gold": _Q[qid][1], "answer": answer, "human": human}
    for n, (qid, answer, human) in enumerate(_LABELLED, 1)
)
