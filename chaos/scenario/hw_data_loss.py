"""``hw-data-loss``: an acknowledged record lost because a restarted follower truncated to
its stale high watermark (docs/replication.md; the data-loss case of the design notes
high-watermark-vs-leader-epoch and watermark-replication).

A leads, B follows, RF 2, min.insync.replicas 1. m0 and m1 are acknowledged with acks=all, so
B holds both, but B learns the high watermark one fetch late: A's HW is 2, B's still 1. B
restarts; before it can fetch from A, A dies and B becomes leader. With high-watermark
truncation (Kafka < 0.11) B cut its log to its HW 1 on restart, and A, back as B's follower,
cuts m1 too: gone for good. With leader-epoch truncation (KIP-101) B keeps m1, since only the
leader's answer to OffsetsForLeaderEpoch may shorten a follower's log.

Two test-only devices hold the cluster in that interleaving:

- B's ``test.follower.hw.update.delay.ms`` (6 s) keeps its HW behind A's while it already
  holds m1; everything from m1's acknowledgement to B's kill takes milliseconds.
- the :class:`~chaos.scripted_controller.ProcessController` stand-in controller: the real
  one (KIP-380) takes a restarted broker out of the ISR, so it would never elect B cleanly
  here; a controller from before Kafka 2.2 missed such a fast restart, and this one plays it.
"""

from __future__ import annotations

from broker.replication.truncation import TruncationMode
from chaos.scenario.cluster import A, B, ScenarioError
from chaos.scenario.play import TP, Play, Scenario
from chaos.scenario.verdict import Found, Prediction
from chaos.scripted_controller import ProcessController

__all__ = ["HW_UPDATE_DELAY_MS", "SCENARIO"]

HW_UPDATE_DELAY_MS = 6000
"""B applies each high watermark it fetches this late (the test-only broker property)."""


def play(p: Play) -> None:
    c, say = p.cluster, p.say
    controller = ProcessController(c.zk, c.brokers)
    epoch = controller.take_over()
    say(
        f"the stand-in controller takes /controller (controller epoch {epoch}) before the "
        "brokers start: it plays a controller from before KIP-380, which misses B's fast "
        "restart and so keeps B in the ISR (the real one would take B out)"
    )
    c.start(A)
    c.start(B)
    say(
        f"A (broker {A}) and B (broker {B}) are up; B applies each high watermark it fetches "
        f"{HW_UPDATE_DELAY_MS / 1000:.0f} s late (test-only test.follower.hw.update.delay.ms), "
        "so that B can hold m1 while its HW still says 1"
    )
    controller.create_topic(TP.topic, {TP.partition: [A, B]})
    say(f"topic {TP.topic}: RF 2, min.insync.replicas 1; A leads at leader epoch 0, ISR [A, B]")

    offset = p.produce(A, "m0")
    c.require(lambda: p.high_watermark(B) == 1, 30, "B's checkpointed HW reaching 1")
    say(f"m0 produced to A with acks=all: acknowledged at offset {offset}; B's HW is now 1")

    offset = p.produce(A, "m1")
    if offset != 1 or p.log(B) != ["m0", "m1"] or p.high_watermark(B) != 1:
        raise _not_the_notes_state(p, offset)
    p.mark("m1 acknowledged")
    say(
        f"m1 produced to A with acks=all: acknowledged at offset {offset}, so B has fetched "
        "it; A's HW is 2, B's still 1 (its update is pending): the state the notes start from"
    )

    c.kill(B)
    say("kill B (SIGKILL) before it learns HW 2: its checkpoint on disk says HW 1")
    c.require(lambda: p.high_watermark(A) == 2, 20, "A's HW 2 reaching its checkpoint")
    c.pause(A)
    say("A's HW 2 is on disk; pause A (SIGSTOP), so that B cannot fetch from it when it returns")

    c.start(B)
    controller.push([TP], to=[B])  # B follows A again, leader epoch 0
    if p.truncates_to_high_watermark:
        c.settle(lambda: p.log(B) == ["m0"], 20)
        p.mark("B truncates m1")
        say(
            "start B; the controller tells it to follow A (epoch 0). High-watermark "
            "truncation: a restarted follower cuts its log to its HW (1), m1 included. B "
            f"holds: {p.holds(B)}"
        )
    else:
        p.mark("B keeps m1")
        say(
            "start B; the controller tells it to follow A (epoch 0). Leader-epoch "
            "truncation: B may cut only to the end of its epoch as the leader reports it "
            f"(OffsetsForLeaderEpoch), and A cannot answer. B holds: {p.holds(B)}"
        )

    c.kill(A)
    say("kill A (SIGKILL): the leader is gone")
    state = controller.elect(TP, B, isr=[B])
    c.timeline.event("elect", B)
    p.mark("B elected")
    say(
        f"the controller elects B (leader epoch {state.leader_epoch}, ISR [B]): a clean "
        "election, B never left the ISR"
    )

    c.start(A)
    controller.push([TP], to=[A])  # A follows B
    controller.wait_for_isr(TP, {A, B}, timeout=30)
    if p.truncates_to_high_watermark:
        c.settle(lambda: p.log(A) == ["m0"], 20)
        p.mark("A truncates m1: m1 lost")
        say(
            "start A; it follows B and finds its offset 1 beyond B's log end, so it cuts m1 "
            f"as well: the acknowledged m1 is gone for good. A holds: {p.holds(A)}; "
            f"B holds: {p.holds(B)}"
        )
    else:
        p.mark("A keeps m1")
        say(
            "start A; it follows B and asks the end of epoch 0 (OffsetsForLeaderEpoch): B "
            f"answers 2, nothing to cut. A holds: {p.holds(A)}; B holds: {p.holds(B)}"
        )


def _not_the_notes_state(p: Play, offset: int) -> ScenarioError:
    return ScenarioError(
        f"m1 was acknowledged at offset {offset}, but the scenario needs it at offset 1 "
        f"with B holding m0, m1 and HW 1: B "
        f"holds {p.holds(B)} with HW {p.high_watermark(B)} (is the machine too slow for "
        f"B's {HW_UPDATE_DELAY_MS} ms delay?)"
    )


SCENARIO = Scenario(
    name="hw-data-loss",
    summary="an acknowledged m1 lost to a follower's stale high watermark",
    setting=(
        "docs/replication.md, data loss: RF 2, min.insync.replicas 1, A leads and B follows; A "
        "acknowledges m0 and m1, B holds both but its HW lags one fetch behind A's; then B "
        "restarts and A dies before B catches up"
    ),
    play=play,
    predictions={
        TruncationMode.HIGH_WATERMARK: Prediction(
            frozenset({Found("lost_ack", 1)}),
            "the acknowledged m1 is lost (lost_ack at offset 1)",
        ),
        TruncationMode.LEADER_EPOCH: Prediction(
            frozenset(), "nothing acknowledged is lost (the audit is clean)"
        ),
    },
    broker_properties={B: {"test.follower.hw.update.delay.ms": str(HW_UPDATE_DELAY_MS)}},
)
