//! `GET /dashboard`: the workspace's verifications over the last 24 hours, 7 days or 30
//! days, as a chart (server-rendered SVG) and per outcome.

use super::answer::{DashError, blocking, html};
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_analytics::VerificationBucket;
use keygate_domain::ErrorCode;
use keygate_rbac::{ApiAccess, VerifyCode};
use keygate_web::{BarChart, Bucket, OverviewPage};
use serde::Deserialize;

pub(super) const HOUR: i64 = 3_600_000;
pub(super) const DAY: i64 = 86_400_000;
const RANGES: [(&str, &str); 3] = [("24h", "24 hours"), ("7d", "7 days"), ("30d", "30 days")];
/// Rows of each overview panel.
const TOP: usize = 10;

#[derive(Debug, Deserialize)]
pub(super) struct RangeQuery {
    range: Option<String>,
}

pub(super) async fn overview(signed: Signed, q: web::Query<RangeQuery>) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    // An unknown range is the default one.
    let range = ["7d", "30d"].into_iter().find(|r| q.range.as_deref() == Some(*r)).unwrap_or("24h");
    let (slots, width) = match range {
        "7d" => (7, DAY),
        "30d" => (30, DAY),
        _ => (24, HOUR),
    };
    let now = state.clock.now_ms() as i64;
    // The last `slots` buckets, the current one included.
    let first = now - now.rem_euclid(width) - (slots - 1) * width;
    let (st, p) = (state.clone(), session.principal.clone());
    let read = blocking(move || {
        let buckets = st.analytics.verification_buckets(&p, None, (first, now), width);
        // The panels: each shown when the root key may read it.
        let top = st.analytics.top_verified(&p, (first, now), TOP).ok();
        let limits = st.analytics.ratelimit_totals(&p, (first, now), TOP).ok();
        Ok((buckets, top, limits))
    })
    .await?;
    let (counted, top, limits) = read;
    let counted = match counted {
        Ok(c) => c,
        Err(e) if e.code() == ErrorCode::InsufficientPermissions => {
            return Err(DashError::Forbidden {
                layout,
                message: "The overview needs the permission api.*.read_analytics (or \
                          api.<apiId>.read_analytics of some API): this root key holds neither."
                    .into(),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let (buckets, totals) = chart_buckets(&counted, first, slots, width);
    let (top_keys, top_identities) = top.unwrap_or_default();
    let outcomes: Vec<(&'static str, u64)> =
        VerifyCode::ALL.iter().zip(totals).map(|(code, n)| (code.as_str(), n)).collect();
    let page = OverviewPage {
        layout,
        ranges: RANGES.to_vec(),
        range: range.to_string(),
        chart: BarChart::new(if width == HOUR { "hour" } else { "day" }, &buckets),
        total: totals.iter().sum(),
        outcomes,
        top_keys,
        top_identities: top_identities
            .into_iter()
            .map(|((id, external), t, ok)| (id, external, t, ok))
            .collect(),
        limits,
        scope: match ApiAccess::of(&session.principal, "read_analytics") {
            Some(ApiAccess::Only(ids)) => ids,
            _ => Vec::new(),
        },
    };
    Ok(html(StatusCode::OK, &page))
}

/// Every slot of the range (empty ones included), and the totals per outcome.
pub(super) fn chart_buckets(
    counted: &[VerificationBucket],
    first: i64,
    slots: i64,
    width: i64,
) -> (Vec<Bucket>, [u64; VerifyCode::ALL.len()]) {
    let mut totals = [0u64; VerifyCode::ALL.len()];
    let buckets = (0..slots)
        .map(|i| {
            let at = first + i * width;
            let found = counted.iter().find(|b| b.start == at).copied().unwrap_or_default();
            let counts = found.counts;
            for (t, c) in totals.iter_mut().zip(counts) {
                *t += c;
            }
            let valid = counts[0];
            Bucket {
                label: label(at, width),
                valid,
                other: counts.iter().sum::<u64>() - valid,
                spent: found.spent_credits,
            }
        })
        .collect();
    (buckets, totals)
}

/// A bucket's label: `HH:00` for hours, `YYYY-MM-DD` for days (UTC).
pub(super) fn label(at: i64, width: i64) -> String {
    let Ok(ts) = jiff::Timestamp::from_millisecond(at) else { return String::new() };
    let dt = ts.to_zoned(jiff::tz::TimeZone::UTC);
    match width {
        HOUR => format!("{:02}:00", dt.hour()),
        _ => format!("{:04}-{:02}-{:02}", dt.year(), dt.month(), dt.day()),
    }
}
