//! `check --json` and `status --json`: the core's reports as typed documents, each finding
//! worded by the caller's [`Advice`] (the core's `Finding` serializes as its words alone, with
//! no fix). The fields are the reports' own, in the same names and shapes; a test holds each
//! document to its report field for field, so a field added to a report cannot go missing
//! here. Fields are declared in alphabetical order, as `BuyJson`'s are: the order these
//! documents have always printed in.

use serde::Serialize;

use crate::Advice;
use lockctl_core::Finding;
use lockctl_core::check::{CheckReport, NodeCheck};
use lockctl_core::orders::PipelineBooks;
use lockctl_core::status::{Holder, Status};
use lockctl_core::stock::buckets::BucketBooks;

/// `check --json`: a [`CheckReport`] with its findings worded.
#[derive(Debug, Serialize)]
pub struct CheckJson<'a> {
    pub addr: &'a str,
    pub native: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeJson<'a>>,
    pub ok: bool,
    /// What makes the server unfit for locking, each with its fix.
    pub problems: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quorum: Option<bool>,
    pub redis_version: &'a str,
    pub role: &'a str,
    pub rtt_max_ms: f64,
    pub rtt_ms: f64,
    pub server: &'a str,
    pub version: &'a str,
    /// Settings that can silently break a lock, each with its fix.
    pub warnings: Vec<String>,
}

/// One Redlock node of [`CheckJson`], why it did not answer worded.
#[derive(Debug, Serialize)]
pub struct NodeJson<'a> {
    pub addr: &'a str,
    pub error: Option<String>,
    pub ok: bool,
    pub rtt_ms: Option<f64>,
}

/// The [`CheckJson`] of `r`, its findings worded by `advice`.
pub fn check_json<'a>(r: &'a CheckReport, advice: &dyn Advice) -> CheckJson<'a> {
    CheckJson {
        ok: r.ok,
        addr: &r.addr,
        server: &r.server,
        version: &r.version,
        redis_version: &r.redis_version,
        role: &r.role,
        rtt_ms: r.rtt_ms,
        rtt_max_ms: r.rtt_max_ms,
        problems: worded(&r.problems, advice),
        warnings: worded(&r.warnings, advice),
        native: &r.native,
        nodes: r.nodes.iter().map(|n| node_json(n, advice)).collect(),
        quorum: r.quorum,
    }
}

fn node_json<'a>(n: &'a NodeCheck, advice: &dyn Advice) -> NodeJson<'a> {
    NodeJson {
        addr: &n.addr,
        ok: n.ok,
        rtt_ms: n.rtt_ms,
        error: n.error.as_ref().map(|e| advice.finding(e)),
    }
}

/// `status --json`: a [`Status`] with its findings worded.
#[derive(Debug, Serialize)]
pub struct StatusJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<&'a [BucketBooks]>,
    pub fence: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_transit: Option<i64>,
    pub ledger_orders: u64,
    pub ledger_qty: i64,
    pub lock: Option<&'a Holder>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orders: Option<&'a PipelineBooks>,
    /// Every check that failed, each with its fix.
    pub problems: Vec<String>,
    pub queue_damaged: u64,
    pub reconciled: Option<bool>,
    pub seeded: Option<i64>,
    pub sku: &'a str,
    pub sold: i64,
    pub stock: Option<i64>,
    pub waiters: u64,
    /// What the books cannot show but may have happened, each with its fix.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The [`StatusJson`] of `st`, its findings worded by `advice`.
pub fn status_json<'a>(st: &'a Status, advice: &dyn Advice) -> StatusJson<'a> {
    StatusJson {
        sku: &st.sku,
        stock: st.stock,
        seeded: st.seeded,
        sold: st.sold,
        ledger_orders: st.ledger_orders,
        ledger_qty: st.ledger_qty,
        reconciled: st.reconciled,
        problems: worded(&st.problems, advice),
        warnings: worded(&st.warnings, advice),
        lock: st.lock.as_ref(),
        fence: st.fence,
        waiters: st.waiters,
        queue_damaged: st.queue_damaged,
        orders: st.orders.as_ref(),
        buckets: st.buckets.as_deref(),
        in_transit: st.in_transit,
    }
}

/// Findings in words, each with its fix in the caller's words.
fn worded(findings: &[Finding], advice: &dyn Advice) -> Vec<String> {
    findings.iter().map(|f| advice.finding(f)).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use lockctl_core::Hint;

    /// Words every fix as `fix`.
    struct Fix;

    impl Advice for Fix {
        fn words(&self, _: &Hint) -> String {
            "fix".into()
        }
    }

    fn finding(text: &str) -> Finding {
        Finding {
            text: text.into(),
            hint: None,
        }
        .with_hint(Hint::StartRedis)
    }

    /// Every optional part present, so that every field is compared.
    fn check_report() -> CheckReport {
        CheckReport {
            ok: false,
            addr: "127.0.0.1:1".into(),
            server: "Valkey".into(),
            version: "8.0.1".into(),
            redis_version: "7.2.4".into(),
            role: "master".into(),
            rtt_ms: 0.125,
            rtt_max_ms: 0.5,
            problems: vec![finding("a problem")],
            warnings: vec![finding("a warning")],
            native: vec!["DELIFEQ".into()],
            nodes: vec![NodeCheck {
                addr: "127.0.0.1:2".into(),
                ok: false,
                rtt_ms: None,
                error: Some(finding("down")),
            }],
            quorum: Some(false),
        }
    }

    fn status() -> Status {
        Status {
            sku: "sku_1".into(),
            stock: Some(3),
            seeded: Some(5),
            sold: 2,
            ledger_orders: 2,
            ledger_qty: 2,
            reconciled: Some(false),
            problems: vec![finding("a problem")],
            warnings: vec![finding("a warning")],
            lock: Some(Holder {
                token: "t".into(),
                ttl_ms: 10,
                fence: Some(4),
                held_ms: Some(1),
            }),
            fence: 4,
            waiters: 1,
            queue_damaged: 0,
            orders: Some(PipelineBooks::default()),
            buckets: Some(vec![BucketBooks::default()]),
            in_transit: Some(0),
        }
    }

    fn value(v: impl Serialize) -> Value {
        serde_json::to_value(v).unwrap()
    }

    #[test]
    fn check_json_is_the_check_report_with_every_finding_worded() {
        let r = check_report();
        // Unworded, a finding is its text: the document is the report, field for field.
        assert_eq!(value(check_json(&r, &crate::Unworded)), value(&r));
        let mut worded = value(&r);
        worded["problems"] = json!(["a problem (fix)"]);
        worded["warnings"] = json!(["a warning (fix)"]);
        worded["nodes"][0]["error"] = json!("down (fix)");
        assert_eq!(value(check_json(&r, &Fix)), worded);
        // Without Redlock nodes, neither `nodes` nor `quorum`, as in the report.
        let plain = CheckReport {
            nodes: Vec::new(),
            quorum: None,
            ..r
        };
        assert_eq!(
            value(check_json(&plain, &Fix))["warnings"],
            json!(["a warning (fix)"])
        );
        assert_eq!(value(check_json(&plain, &crate::Unworded)), value(&plain));
    }

    #[test]
    fn status_json_is_the_status_with_every_finding_worded() {
        let st = status();
        assert_eq!(value(status_json(&st, &crate::Unworded)), value(&st));
        let mut worded = value(&st);
        worded["problems"] = json!(["a problem (fix)"]);
        worded["warnings"] = json!(["a warning (fix)"]);
        assert_eq!(value(status_json(&st, &Fix)), worded);
        // No warnings, no orders, no buckets: absent, as in the report.
        let bare = Status {
            warnings: Vec::new(),
            lock: None,
            orders: None,
            buckets: None,
            in_transit: None,
            ..st
        };
        assert_eq!(value(status_json(&bare, &crate::Unworded)), value(&bare));
    }
}
