"""Where the run goes next: one edge function for every node with more than one way out.

The node that decides writes its decision into the state (``next_step``), beside the facts it
decided on; the graph only follows it. ``search`` fans the round's tasks out, one ``Send``
each, so every (subquery, source) pair is its own task in Studio. The builder lists each
node's possible next steps with its edge, so Studio draws the real edges.

Who decides, on what:

=================  ===================================================  ====================
node               next step                                            decided on
=================  ===================================================  ====================
begin_turn         judge_question | plan_queries | prepare_searches     the effort and who
                                                                        plans (``effort``)
judge_question     plan_queries | prepare_searches                      the question's shape
plan_queries       prepare_searches | respond                           the planner's reply
prepare_searches   search | rerank (nothing to search)                  the round's tasks
rerank             ``judge`` (assess_evidence | judge_results) |        ``judge``, written by
                   synthesize | respond (a failOnError source failed)   begin_turn and
                                                                        judge_results
judge_results      plan_queries | assess_evidence | synthesize          the results' strength
assess_evidence    search (a follow-up round) | synthesize              the evidence and the
                                                                        follow-up budget
=================  ===================================================  ====================
"""

from __future__ import annotations

from langgraph.types import Send

from agentic_retrieval.state import RetrievalState


def follow(state: RetrievalState) -> str | list[Send]:
    """The step the last deciding node chose; ``search`` is one ``Send`` per search task.

    Raises:
        RuntimeError: The node that just ran did not decide (a wiring error).
    """
    if state.next_step is None:
        raise RuntimeError("a node with several ways out did not set next_step")
    if state.next_step == "search":
        return [Send("search", task) for task in state.searches]
    return state.next_step
