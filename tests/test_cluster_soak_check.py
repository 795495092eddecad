"""benchmarks/cluster_soak.py's checker on dig output the soak's pod loop wrote (no cluster needed)."""

from __future__ import annotations

from benchmarks.cluster_soak_check import Timeline, age, cause, judge, parse_line, windows

# Four lines of a real run: an SRV answer, an NXDOMAIN, a refused TCP connection (the kube-dns
# Service without a ready endpoint) and an A answer over TCP.
SRV, NOPE, REFUSED, WEB = (
    'Q 1796534305.054855332 1796534305.194576052 srv udp ;; Got answer:|;; WARNING: .local is reserved for Multicast DNS|;; You are currently testing what happens when an mDNS query is leaked to DNS|;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 52987|;; flags: qr aa rd; QUERY: 1, ANSWER: 2, AUTHORITY: 0, ADDITIONAL: 3|;; WARNING: recursion requested but not available||;; OPT PSEUDOSECTION:|; EDNS: version: 0, flags:; udp: 1232|; COOKIE: 5ec7cc578cdbd059 (echoed)|;; ANSWER SECTION:|_pg._tcp.db.soak.svc.clusterset.local. 5 IN SRV\t0 50 5432 db-0.c1.db.soak.svc.clusterset.local.|_pg._tcp.db.soak.svc.clusterset.local. 5 IN SRV\t0 50 5432 db-1.c1.db.soak.svc.clusterset.local.||',
    'Q 1796534305.500503094 1796534305.683166350 nope udp ;; Got answer:|;; WARNING: .local is reserved for Multicast DNS|;; You are currently testing what happens when an mDNS query is leaked to DNS|;; ->>HEADER<<- opcode: QUERY, status: NXDOMAIN, id: 49793|;; flags: qr aa rd; QUERY: 1, ANSWER: 0, AUTHORITY: 1, ADDITIONAL: 1|;; WARNING: recursion requested but not available||;; OPT PSEUDOSECTION:|; EDNS: version: 0, flags:; udp: 1232|; COOKIE: f8fb309755ed2c29 (echoed)|',
    'Q 1796534453.186165756 1796534453.518912016 db-2 tcp ;; Connection to 10.96.0.10#53(10.96.0.10) for db-2.c1.db.soak.svc.clusterset.local failed: connection refused.|;; no servers could be reached|',
    'Q 1796534305.005983375 1796534305.166181159 web tcp ;; Got answer:|;; WARNING: .local is reserved for Multicast DNS|;; You are currently testing what happens when an mDNS query is leaked to DNS|;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 55691|;; flags: qr aa rd; QUERY: 1, ANSWER: 1, AUTHORITY: 0, ADDITIONAL: 1|;; WARNING: recursion requested but not available||;; OPT PSEUDOSECTION:|; EDNS: version: 0, flags:; udp: 1232|; COOKIE: 8cfc52ded1a04ab2 (echoed)|;; ANSWER SECTION:|web.soak.svc.clusterset.local. 5 IN\tA\t10.245.0.10||',
)
DB = "db.soak.svc.clusterset.local"


def at(line: str, sent: float, received: float | None = None) -> str:
    parts = line.split(" ", 3)
    return " ".join(["Q", str(sent), str(received if received is not None else sent + 0.1), parts[3]])


def test_dig_output_is_parsed_into_rcode_and_data() -> None:
    srv = parse_line(SRV)
    assert srv is not None and srv.key == "srv" and srv.proto == "udp"
    assert srv.answer == ("NOERROR", frozenset({f"db-0.c1.{DB}", f"db-1.c1.{DB}"}))
    nope = parse_line(NOPE)
    assert nope is not None and nope.answer == ("NXDOMAIN", frozenset())
    refused = parse_line(REFUSED)
    assert refused is not None and refused.proto == "tcp" and refused.answer is None
    web = parse_line(WEB)
    assert web is not None and web.answer == ("NOERROR", frozenset({"10.245.0.10"}))
    assert parse_line("nohup: ignoring input") is None


def test_an_answer_is_right_within_the_propagation_window_and_wrong_after_it() -> None:
    timeline = Timeline()
    timeline.set("web", 0.0, 0.1, ("NOERROR", frozenset({"10.245.0.10"})))
    timeline.set("web", 100.0, 100.2, ("NOERROR", frozenset({"10.245.0.11"})))
    old = WEB  # answers 10.245.0.10
    assert judge(parse_line(at(old, 50.0)), timeline) == "ok"
    assert judge(parse_line(at(old, 106.0)), timeline) == "ok"  # 5.8 s after the write returned: allowed
    late = parse_line(at(old, 108.0))
    assert judge(late, timeline) == "wrong"  # 7.8 s: beyond cache 5 s + 2 s
    assert round(timeline.stale_by("web", late.sent, late.received, late.answer), 1) == 7.8
    # The new answer is right from the moment the write was sent, never before.
    new = WEB.replace("10.245.0.10", "10.245.0.11")
    assert judge(parse_line(at(new, 100.1)), timeline) == "ok"
    assert judge(parse_line(at(new, 90.0, 90.1)), timeline) == "wrong"
    assert judge(parse_line(at(REFUSED, 50.0)), timeline) == "lost"


def test_failures_group_into_windows_tied_to_the_event_before_them() -> None:
    timeline = Timeline()
    timeline.set("web", 0.0, 0.1, ("NOERROR", frozenset({"10.245.0.10"})))
    timeline.set("db-2", 0.0, 0.1, ("NOERROR", frozenset({"10.245.1.3"})))
    queries = [parse_line(at(WEB, t)) for t in (10, 11, 12, 13, 40, 41)]
    queries += [parse_line(at(REFUSED, t)) for t in (11.5, 12.5, 30, 30.5)]
    judged = [(q, judge(q, timeline)) for q in queries]
    found = windows(judged)
    assert [(w.start, len(w.failures), w.answered_inside) for w in found] == [(11.5, 2, 1), (30.0, 2, 0)]
    events = [(5.0, "mcsdns rollout 1"), (29.0, "kube-apiserver restart")]
    assert cause(found[0], events) == ("mcsdns rollout 1", 6.5)
    assert cause(found[1], events) == ("kube-apiserver restart", 1.0)


def test_an_answers_age_is_how_long_its_state_had_been_replaced_when_asked() -> None:
    """What a path's lag is measured by (Knot's after its mcsdns pod went): 0 while the answer is the
    API's state, the time since the replacing write returned after that, None without an answer."""
    timeline = Timeline()
    timeline.set("web", 0.0, 0.1, ("NOERROR", frozenset({"10.245.0.10"})))
    timeline.set("web", 100.0, 100.2, ("NOERROR", frozenset({"10.245.0.11"})))
    assert age(parse_line(at(WEB, 50.0)), timeline) == 0.0
    assert age(parse_line(at(WEB, 100.1)), timeline) == 0.0  # sent before the write returned
    assert round(age(parse_line(at(WEB, 103.0)), timeline), 1) == 2.8  # right (within 7 s), 2.8 s old
    assert round(age(parse_line(at(WEB, 109.0)), timeline), 1) == 8.8  # wrong, and how old
    assert age(parse_line(at(WEB.replace("10.245.0.10", "10.245.0.99"), 50.0)), timeline) is None
    assert age(parse_line(at(REFUSED, 50.0)), timeline) is None
