"""Issue 26 item 15: two ingests into one corpus at once, of different files with one name, end with
both accounted for (one stored, one refused with a reason), never one silently replacing the other."""

import threading
from pathlib import Path

from tests.pdfs import make_pdf
from tools.corpus import CorpusStore, IngestConfig, ingest


def test_finding15_two_concurrent_ingests_of_one_name_both_accounted_for_20_of_20(tmp_path):
    first, second = tmp_path / "a" / "report.pdf", tmp_path / "b" / "report.pdf"
    make_pdf(first, ["Alder revenue 2021 was 120", "Alder costs"])
    make_pdf(second, ["Birch revenue 2022 was 80"])
    outcomes = []
    for attempt in range(20):
        corpus = tmp_path / f"corpus-{attempt}"
        start = threading.Barrier(2)
        summaries = {}

        def run(path: Path):
            start.wait()
            summaries[path] = ingest([path], corpus, IngestConfig(workers=1))

        threads = [threading.Thread(target=run, args=(p,)) for p in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        stored = CorpusStore(corpus).documents()
        winners = [p for p, s in summaries.items() if s.documents == 1 and not s.errors]
        losers = [p for p, s in summaries.items() if s.documents == 0 and len(s.errors) == 1
                  and "already used by" in s.errors[0]["reason"]]
        ok = (len(stored) == 1 and len(winners) == 1 and len(losers) == 1
              and stored[0].source_path == str(winners[0]))
        outcomes.append(ok or (len(stored), {str(p): (s.documents, s.errors) for p, s in summaries.items()}))
    assert outcomes == [True] * 20, [o for o in outcomes if o is not True][:3]


def test_finding15_an_ingest_waits_for_the_corpus_lock_and_names_its_holder(tmp_path, caplog):
    import fcntl
    import os

    from tools.corpus.ingest import LOCK

    make_pdf(tmp_path / "src" / "memo.pdf", ["Memo"])
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    holder = open(corpus / LOCK, "a+")
    fcntl.flock(holder, fcntl.LOCK_EX)
    holder.write(f"{os.getpid()}\n")
    holder.flush()
    timer = threading.Timer(0.5, lambda: (fcntl.flock(holder, fcntl.LOCK_UN), holder.close()))
    timer.start()
    with caplog.at_level("INFO"):
        summary = ingest([tmp_path / "src"], corpus, IngestConfig(workers=1))
    timer.join()
    assert summary.documents == 1
    assert any(f"pid {os.getpid()}" in r.getMessage() for r in caplog.records), caplog.text
