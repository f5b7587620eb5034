#!/usr/bin/env python3
"""The random-hashing expectation for ECMP collisions on a 2-tier leaf-spine.

A permutation over NICs; each flow leaving its ToR takes a uniformly random spine; flows get max-min fair
rates (progressive filling) over their NIC links and the ToR-spine links. Prints the mean over trials of
the aggregate rate normalised to the NICs' total, for the shapes of configs/sim/tor-split-*.yaml and
for a 32 x 32 case (32 ToRs, 32 spines; ~0.51 at link rate and ~0.64 with 2 x 200G splits). No
congestion-control dynamics: the simulator's figures (sim/README.md, "ToR split") are to be read against these.
    python3 scripts/ecmp-collisions.py
"""
import random


def normalised_throughput(tors, spines, nics_per_tor, nic_gbps, uplink_gbps, trials, rng):
    total = 0.0
    n = tors * nics_per_tor
    for _ in range(trials):
        partner = list(range(n))
        for i in range(n - 1, 0, -1):  # Sattolo: a single cycle, nobody sends to itself
            j = rng.randrange(i)
            partner[i], partner[j] = partner[j], partner[i]
        flows = []
        for src in range(n):
            dst = partner[src]
            links = [("nic-out", src), ("nic-in", dst)]
            t_src, t_dst = src // nics_per_tor, dst // nics_per_tor
            if t_src != t_dst:
                spine = rng.randrange(spines)
                links += [("up", t_src, spine), ("down", spine, t_dst)]
            flows.append(links)
        left = {l: (nic_gbps if l[0].startswith("nic") else uplink_gbps) for f in flows for l in f}
        rate = [0.0] * n
        active = set(range(n))
        while active:  # progressive filling: raise every active flow until a link fills
            users = {}
            for i in active:
                for l in flows[i]:
                    users[l] = users.get(l, 0) + 1
            step = min(left[l] / users[l] for l in users)
            for l in users:
                left[l] -= step * users[l]
            for i in active:
                rate[i] += step
            active = {i for i in active if all(left[l] > 1e-9 for l in flows[i])}
        total += sum(rate) / (n * nic_gbps)
    return total / trials


def main():
    rng = random.Random(1)
    cases = [
        ("tor-split-none: 8 ToRs x 8 x 400G NICs, 8 spines", 8, 8, 8, 400, 400, 2000),
        ("tor-split-2x200: 8 ToRs x 16 x 200G NICs, 8 spines", 8, 8, 16, 200, 400, 2000),
        ("32 ToRs x 32 hosts, 32 spines, host = link rate", 32, 32, 32, 400, 400, 200),
        ("32 ToRs x 64 hosts at half link rate (2x200G split)", 32, 32, 64, 200, 400, 100),
    ]
    for name, tors, spines, per_tor, nic, up, trials in cases:
        print(f"{normalised_throughput(tors, spines, per_tor, nic, up, trials, rng):.3f}  {name} ({trials} trials)")


if __name__ == "__main__":
    main()
