"""Held-out splits by document: no document's pages are seen in training and in evaluation.

Splitting by question alone leaks: two questions about the same filing share its vocabulary,
its page layout and often its very gold page, so a policy that memorised one filing's words
would look like it learned to formulate queries. Questions are grouped by their gold documents
(a question citing two documents joins their groups, so a cross-document question never
straddles the split), and whole groups go to one side.

The assignment is deterministic: groups are ordered by a hash of their documents and the
seed, and taken into the held-out side until it holds the requested share of questions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.datasets.formats import Question
from tools.errors import DossierError

__all__ = ["DocumentSplit", "split_by_document", "document_groups"]


@dataclass(slots=True)
class DocumentSplit:
    """Which questions and documents are for training and which are held out."""

    train_ids: list[str]  # question ids whose gold documents are all training documents
    heldout_ids: list[str]  # question ids whose gold documents are all held-out documents
    train_documents: list[str]  # sorted document ids of the training side
    heldout_documents: list[str]  # sorted document ids of the held-out side
    no_evidence_ids: list[str] = field(default_factory=list)  # questions without gold pages: on neither side
    seed: int = 0  # the seed that ordered the groups
    heldout_share: float = 0.3  # requested share of questions held out

    def side_of(self, question_id: str) -> str | None:
        """"train", "heldout", or None for a question on neither side."""
        if question_id in self.train_ids:
            return "train"
        if question_id in self.heldout_ids:
            return "heldout"
        return None

    def to_json(self) -> dict:
        return {"seed": self.seed, "heldout_share": self.heldout_share,
                "train": {"questions": len(self.train_ids), "documents": len(self.train_documents)},
                "heldout": {"questions": len(self.heldout_ids), "documents": len(self.heldout_documents)},
                "train_ids": self.train_ids, "heldout_ids": self.heldout_ids,
                "train_documents": self.train_documents, "heldout_documents": self.heldout_documents,
                "no_evidence_ids": self.no_evidence_ids}


def document_groups(questions: Iterable[Question]) -> list[tuple[list[str], list[str]]]:
    """Connected groups of (documents, question ids): questions sharing a gold document are together."""
    parent: dict[str, str] = {}

    def find(doc: str) -> str:
        while parent[doc] != doc:
            parent[doc] = parent[parent[doc]]
            doc = parent[doc]
        return doc

    with_docs = []
    for q in questions:
        docs = sorted({e.document for e in q.evidence})
        if not docs:
            continue
        with_docs.append((q.id, docs))
        for doc in docs:
            parent.setdefault(doc, doc)
        for doc in docs[1:]:
            parent[find(doc)] = find(docs[0])
    groups: dict[str, tuple[set[str], list[str]]] = {}
    for qid, docs in with_docs:
        documents, ids = groups.setdefault(find(docs[0]), (set(), []))
        documents.update(docs)
        ids.append(qid)
    return [(sorted(documents), ids) for documents, ids in groups.values()]


def split_by_document(questions: list[Question], heldout_share: float = 0.3, seed: int = 0) -> DocumentSplit:
    """Split questions into training and held-out sides with no gold document on both.

    Args:
        questions: the questions (their gold evidence decides the documents).
        heldout_share: the share of questions (with evidence) to hold out, in (0, 1).
        seed: orders the document groups; the same seed gives the same split.

    Raises:
        DossierError: the share is outside (0, 1), or one side would be empty.
    """
    if not 0 < heldout_share < 1:
        raise DossierError(f"the held-out share must be between 0 and 1 (got {heldout_share})")
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        duplicated = sorted({i for i in ids if ids.count(i) > 1})
        raise DossierError(f"question ids must be unique to split by document; repeated: {', '.join(duplicated[:5])}")
    groups = document_groups(questions)
    if len(groups) < 2:
        raise DossierError(f"the questions cite {len(groups)} group(s) of documents; a split by document needs at "
                           "least 2 groups of documents that share no question")
    groups.sort(key=lambda g: hashlib.sha256(f"{seed}|{'|'.join(g[0])}".encode()).hexdigest())
    total = sum(len(g[1]) for g in groups)
    target = heldout_share * total
    heldout_docs: list[str] = []
    heldout_ids: list[str] = []
    train_docs: list[str] = []
    train_ids: list[str] = []
    for docs, qids in groups:
        # take a group while it brings the held-out side closer to its target share
        if len(heldout_ids) < target and abs(len(heldout_ids) + len(qids) - target) <= abs(len(heldout_ids) - target):
            heldout_docs += docs
            heldout_ids += qids
        else:
            train_docs += docs
            train_ids += qids
    if not heldout_ids or not train_ids:
        raise DossierError(f"a held-out share of {heldout_share} leaves one side empty with these {len(groups)} "
                           "document groups; choose a share nearer 0.5")
    order = {q.id: i for i, q in enumerate(questions)}
    no_evidence = [q.id for q in questions if not q.evidence]
    return DocumentSplit(sorted(train_ids, key=order.get), sorted(heldout_ids, key=order.get), sorted(train_docs),
                         sorted(heldout_docs), no_evidence, seed, heldout_share)
