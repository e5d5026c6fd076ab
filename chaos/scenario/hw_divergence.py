"""``hw-divergence``: two replicas holding different records at one committed offset after an
unclean election (docs/replication.md; the divergence case of the design notes
high-watermark-vs-leader-epoch and watermark-replication).

A leads, B follows, RF 2, min.insync.replicas 1. A holds m0, m1 (HW 2), B only m0 (HW 1):
B stalled and left the ISR, so A acknowledged m1 alone. Both die; B returns first and leads,
which it may only because the topic allows an unclean election (the Turkish note's first
condition; its second, an unflushed m1 lost in a power failure, is not reproduced). A
producer writes m2 at offset 1 on B; then A returns. With high-watermark truncation (Kafka <
0.11) A finds the leader's HW equal to its own and truncates nothing: it keeps m1 where B has
m2, for good. With leader-epoch truncation (KIP-101) A asks B where epoch 0 ended, cuts
offset 1 and copies m2.

m1 is lost in both modes: it was acknowledged by A alone and the unclean election chose a
leader without it. That is the price of the unclean election; what leader epochs fix is the
divergence. Here the brokers' own controller makes every decision.
"""

from __future__ import annotations

from broker.replication.truncation import TruncationMode
from chaos.scenario.cluster import A, B
from chaos.scenario.play import TP, Play, Scenario
from chaos.scenario.verdict import Found, Prediction
from deploy.cluster_probe import create_topic

__all__ = ["SCENARIO"]


def play(p: Play) -> None:
    c, say = p.cluster, p.say
    c.start(A)
    c.start(B)
    say(
        f"A (broker {A}) and B (broker {B}) are up, each with its controller candidate: here "
        "the real controller makes every decision"
    )
    create_topic(c.zk, TP.topic, {TP.partition: [A, B]}, {"unclean.leader.election.enable": "true"})
    c.require(lambda: c.serving_leader(TP) == A, 30, "A leading the new topic")
    say(
        f"topic {TP.topic}: RF 2, min.insync.replicas 1, unclean.leader.election.enable=true "
        "(the notes: B can lead later only from outside the ISR); A leads at leader epoch 0"
    )

    offset = p.produce(A, "m0")
    c.require(lambda: p.high_watermark(B) == 1, 30, "B's checkpointed HW reaching 1")
    say(f"m0 produced to A with acks=all: acknowledged at offset {offset}; B holds it, HW 1")

    c.pause(B)
    say("pause B (SIGSTOP): B stalls with m0 and HW 1")
    offset = p.produce(A, "m1")
    c.require(lambda: c.isr(TP) == {A}, 30, "B leaving the ISR")
    c.require(lambda: p.high_watermark(A) == 2, 20, "A's HW 2 reaching its checkpoint")
    p.mark("m1 acknowledged by A alone")
    say(
        f"m1 produced to A with acks=all: A drops the silent B from the ISR after "
        f"replica.lag.time.max.ms and acknowledges m1 alone, at offset {offset}; A's HW is 2"
    )

    c.kill(B)
    c.kill(A)
    say(
        f"kill B, then A (SIGKILL): both down; A holds {p.holds(A)} (HW "
        f"{p.high_watermark(A)}), B holds {p.holds(B)} (HW {p.high_watermark(B)})"
    )

    c.start(B)
    c.require(lambda: c.serving_leader(TP) == B, 30, "B leading after its return")
    c.timeline.event("unclean-elect", B)
    p.mark("B elected uncleanly")
    say(
        "start B first: no replica of the ISR is alive, and as the topic allows it the "
        "controller elects B from outside the ISR (an unclean election, leader epoch "
        f"{c.leader_epoch(TP)})"
    )
    offset = p.produce(B, "m2", acks=1)
    p.mark(f"m2 at offset {offset} on B")
    say(
        f"m2 produced to B: acknowledged at offset {offset}, where A holds m1; B, the whole "
        "ISR now, moves its HW to 2"
    )

    c.start(A)
    c.require(lambda: c.isr(TP) == {A, B}, 30, "A rejoining the ISR")
    if p.truncates_to_high_watermark:
        p.mark("A keeps m1: divergence")
        say(
            "start A; it follows B. High-watermark truncation: A cuts its log to its HW, 2, "
            "which is already its end, so it keeps m1 at offset 1 where B holds m2, both "
            f"below the HW. A holds: {p.holds(A)}; B holds: {p.holds(B)}"
        )
    else:
        c.settle(lambda: p.log(A) == ["m0", "m2"], 20)
        p.mark("A truncates m1, copies m2")
        say(
            "start A; it follows B. Leader-epoch truncation: A asks where its epoch 0 ended "
            "(OffsetsForLeaderEpoch), B answers 1, the start of epoch 1, so A cuts offset 1 "
            f"and copies m2. A holds: {p.holds(A)}; B holds: {p.holds(B)}"
        )


_M1_LOST = "the acknowledged m1 is lost (lost_ack at offset 1), the price of the unclean election"

SCENARIO = Scenario(
    name="hw-divergence",
    summary="replicas that disagree at a committed offset after an unclean election",
    setting=(
        "docs/replication.md, divergence: RF 2, min.insync.replicas 1, A leads and B follows; A "
        "holds m0, m1 (HW 2), B only m0 (HW 1); both die, B returns first and leads through "
        "an unclean election, a producer writes m2, then A returns"
    ),
    play=play,
    predictions={
        TruncationMode.HIGH_WATERMARK: Prediction(
            frozenset({Found("divergence", 1), Found("lost_ack", 1)}),
            "the replicas disagree at offset 1 for good, A with m1 and B with m2 (divergence); "
            + _M1_LOST,
        ),
        TruncationMode.LEADER_EPOCH: Prediction(
            frozenset({Found("lost_ack", 1)}),
            "no divergence, A truncated m1 and copied m2; " + _M1_LOST,
        ),
    },
    note=(
        "note: m1 was acknowledged by A alone and the unclean election made B leader "
        "without it, so m1 is lost in both truncation modes: the lost_ack is the price of "
        "the unclean election. What leader epochs fix is the divergence."
    ),
)
