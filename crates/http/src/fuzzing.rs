//! The HTTP layer's entry points for the fuzz targets (`tests/fuzz`, run with `cargo fuzz`;
//! docs/security.md, "Fuzzing"): each takes any input and must return, never panic. Not an
//! API: the property tests beside each parser run the same inputs' kinds on stable in CI.

/// The JSON body reader on the rate-limit bodies (v1 `ratelimits.limit`, v2
/// `ratelimit.limit` and `ratelimit.multiLimit`), each read and checked as its handler does.
pub fn request_body(data: &[u8]) {
    use crate::handlers::{ratelimit as v1, v2::ratelimit as v2};
    if let Ok(body) = crate::plumbing::parse_json::<v1::LimitBody<'_>>(data) {
        let _ = body.validate();
    }
    if let Ok(body) = crate::plumbing::parse_json::<v2::LimitBody<'_>>(data) {
        let _ = body.validate("");
    }
    if let Ok(bodies) = crate::plumbing::parse_json_as::<Vec<v2::LimitBody<'_>>>(data, b'[') {
        for body in bodies {
            let _ = body.validate("");
        }
    }
}
