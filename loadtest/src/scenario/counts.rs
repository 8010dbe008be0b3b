//! Turning what the workers counted into report rows: pushes, deliveries,
//! losses, duplicates, and the spread of each message over its recipients.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::hist::{self, Hist};
use crate::pusher::{self, Record};
use crate::report::Report;
use crate::worker::protocol::{Kind, Outcome};

/// The push rows: sent, accepted, round trips, the warm-up.
pub(super) fn report_pushes(
    report: &mut Report,
    records: &[Record],
    push_secs: f64,
    warm_got: Option<u64>,
    problems: &mut Vec<String>,
) {
    let (rtt, accepted) = pusher::summarize(records);
    let sent = records.len() as u64;
    report.metric("pushes", "pushes sent", sent, "");
    report.metric("pushes_accepted", "pushes accepted (2xx)", accepted, "");
    report.metric("push_secs", "pushing took", hist::round2(push_secs), "s");
    report.histogram_row("push_rtt", "push round trip", &rtt);
    if accepted < sent {
        let mut statuses = BTreeMap::<u16, u64>::new();
        for r in records {
            *statuses.entry(r.status).or_default() += 1;
        }
        problems.push(format!(
            "{} of {sent} pushes refused (statuses {statuses:?})",
            sent - accepted
        ));
    }
    if let Some(got) = warm_got {
        report.metric("warmup_got", "clients with the warm-up cursor", got, "");
    }
}

/// Sums the counters; returns deliveries.
pub(super) fn report_counts(
    report: &mut Report,
    outcomes: &[(Kind, Outcome)],
    expected: u64,
    problems: &mut Vec<String>,
) -> u64 {
    let sum = |f: fn(&Outcome) -> u64| outcomes.iter().map(|(_, o)| f(o)).sum::<u64>();
    let delivered = sum(|o| o.delivered);
    let lost = sum(|o| o.lost);
    let duplicates = sum(|o| o.duplicates);
    let unexpected = sum(|o| o.unexpected);
    report.metric("expected_deliveries", "deliveries expected", expected, "");
    report.metric("delivered", "deliveries", delivered, "");
    report.metric("lost", "lost (silently)", lost, "");
    let lost_reported = sum(|o| o.lost_reported);
    if lost_reported > 0 {
        report.metric(
            "lost_reported",
            "missing after a recover with complete: false",
            lost_reported,
            "",
        );
    }
    report.metric("duplicates", "duplicated", duplicates, "");
    report.metric("out_of_order", "out of order", sum(|o| o.out_of_order), "");
    report.metric(
        "complete_clients",
        "clients with every message",
        sum(|o| o.complete),
        "",
    );
    let reconnects = sum(|o| o.reconnects);
    if reconnects > 0 || sum(|o| o.reconnect_failures) > 0 {
        report.metric("reconnects", "reconnects", reconnects, "");
        report.metric(
            "reconnect_failures",
            "reconnect failures",
            sum(|o| o.reconnect_failures),
            "",
        );
        report.metric(
            "recover_complete",
            "recover frames, complete",
            sum(|o| o.recover_complete),
            "",
        );
        report.metric(
            "recover_incomplete",
            "recover frames, incomplete",
            sum(|o| o.recover_incomplete),
            "",
        );
    }
    report.detail("unexpected", unexpected);
    report.detail("dropped_by_server", sum(|o| o.dropped));
    let mut closes = BTreeMap::<String, u64>::new();
    let mut errors: Vec<String> = Vec::new();
    for (_, o) in outcomes {
        for (k, v) in &o.closes {
            *closes.entry(k.clone()).or_default() += v;
        }
        errors.extend(
            o.errors
                .iter()
                .filter(|e| !errors.contains(e))
                .cloned()
                .collect::<Vec<_>>(),
        );
    }
    report.detail(
        "closes",
        serde_json::to_value(&closes).unwrap_or(Value::Null),
    );
    report.detail("errors", errors.clone());
    if lost > 0 || duplicates > 0 || unexpected > 0 || delivered < expected {
        problems.push(format!(
            "{delivered} of {expected} delivered, {lost} lost, {lost_reported} missing \
             after complete: false, {duplicates} duplicated, {unexpected} unexpected \
             (closes {closes:?}, errors {errors:?})"
        ));
    }
    delivered
}

/// Delivery latency over the outcomes of `kind` (all when `None`).
pub(super) fn merged(outcomes: &[(Kind, Outcome)], kind: Option<Kind>) -> Hist {
    let mut h = hist::new_hist();
    for (_, o) in outcomes
        .iter()
        .filter(|(k, _)| kind.is_none_or(|want| *k == want))
    {
        hist::add_pairs(&mut h, &o.latency);
    }
    h
}

/// Per message number: push (first push of that number) to its first and
/// to its last recipient, µs.
pub(super) fn spread(
    outcomes: &[(Kind, Outcome)],
    records: &[Record],
    expect: u64,
) -> (Hist, Hist) {
    let mut to_first = hist::new_hist();
    let mut to_last = hist::new_hist();
    for seq in 1..=expect {
        let Some(sent) = records
            .iter()
            .filter(|r| r.seq == seq)
            .map(|r| r.sent_us)
            .min()
        else {
            continue;
        };
        let stats = outcomes
            .iter()
            .filter_map(|(_, o)| o.per_seq.get(seq as usize))
            .filter(|s| s.got > 0);
        let first = stats.clone().map(|s| s.first_us).min();
        let last = stats.map(|s| s.last_us).max();
        if let (Some(first), Some(last)) = (first, last) {
            hist::record(&mut to_first, first.saturating_sub(sent));
            hist::record(&mut to_last, last.saturating_sub(sent));
        }
    }
    (to_first, to_last)
}
