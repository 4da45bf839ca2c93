"""The guided loop for weak models (--loop guided) against MADQA's exact loop (--loop madqa), scripted."""

import json

from engine.agents.backend import ScriptedBackend
from engine.agents.env import AgentEnv
from engine.agents.runner import RolloutRunner
from engine.agents.settings import AgentSettings
from tests.agents.scripted import build_corpus, questions


def _run(tmp_path, policy, loop: str, n: int = 1):
    env = AgentEnv(build_corpus(tmp_path / "c"), page_chars=400)
    searches = []
    search = env.search
    env.search = lambda query, k, *args, **kwargs: searches.append(query) or search(query, k, *args, **kwargs)
    seen = []

    def recording(qid, turn, messages):
        seen.append(messages[-1][1])
        return policy(qid, turn, messages)

    settings = AgentSettings(loop=loop, max_iterations=4)
    RolloutRunner(ScriptedBackend(recording), settings, env, tmp_path / f"run-{loop}").run(questions(n))
    trajectory = json.loads((tmp_path / f"run-{loop}" / "trajectories.jsonl").read_text().splitlines()[0])
    return searches, seen, trajectory["steps"]


def same_query_three_times(qid, turn, messages):
    if turn <= 3:
        return json.dumps({"tool": "search", "query": "Revenue  2019" if turn == 2 else "revenue 2019"})
    return json.dumps({"tool": "answer", "answer": ["$48,250"], "citations": [{"document": "report", "page": 1}]})


def test_guided_answers_a_repeated_query_with_what_it_returned_instead_of_running_it(tmp_path):
    searches, seen, steps = _run(tmp_path, same_query_three_times, "guided")
    assert searches == ["revenue 2019"]  # case and spacing do not make a search new
    assert seen[2].startswith('You already searched for "Revenue  2019" (turn 1); it returned File: report, Page: 1')
    assert "Search with different words, or answer" in seen[2]
    assert steps[1]["tool_call"]["name"] == "search"  # still a search the model issued: effort counts it
    assert steps[1]["tool_result"] == {"pages": [{"document": "report", "page": 1}], "repeat_of_step": 1}
    assert steps[1]["timing"]["tool_s"] == 0.0


def test_madqa_runs_every_search_and_shows_the_same_pages_again(tmp_path):
    searches, seen, steps = _run(tmp_path, same_query_three_times, "madqa")
    assert searches == ["revenue 2019", "Revenue  2019", "revenue 2019"]
    assert seen[1].startswith("Search results for: revenue 2019")
    assert seen[2].startswith("Search results for: Revenue  2019\n\n[1] File: report, Page: 1\nRevenue in 2019")
    assert seen[3].startswith("Search results for: revenue 2019\n\n[1] File: report, Page: 1\nRevenue in 2019")
    assert "repeat_of_step" not in steps[1]["tool_result"]


def words_no_page_holds_together(qid, turn, messages):
    if turn == 1:
        return json.dumps({"tool": "search", "query": "revenue spaghetti zebra"})
    return json.dumps({"tool": "answer", "answer": ["x"], "citations": []})


def test_guided_names_the_failed_words_and_a_shorter_query_that_matches(tmp_path):
    _, seen, steps = _run(tmp_path, words_no_page_holds_together, "guided")
    assert seen[1].startswith("No page holds all of these together: revenue (1 page), spaghetti (1 page), "
                              "zebra (no page).")
    assert 'for example "revenue" matches 1 page' in seen[1] or 'for example "spaghetti" matches 1 page' in seen[1]
    assert steps[0]["tool_result"] == {"pages": []}


def test_madqa_keeps_its_plain_no_result_message(tmp_path):
    _, seen, _ = _run(tmp_path, words_no_page_holds_together, "madqa")
    assert seen[1].startswith("No pages match this query. Try fewer words")
