//! `POST /v1/secret-scanning/github` (API-v2.md §24): GitHub's secret scanning partner
//! protocol. No root key: the report is accepted only under a valid signature of one of
//! the public keys GitHub publishes (`KEYGATE_GITHUB_SCANNING_KEYS`), else 401 and nothing
//! happens (`keygate_scanning`).

use crate::error::ApiError;
use crate::openapi::V1BodyErrors;
use crate::plumbing::{blocking, read_body};
use crate::state::AppState;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

/// One token GitHub found.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct ReportedToken {
    /// The string found.
    token: String,
    /// The token type registered with GitHub.
    #[schema(rename = "type")]
    token_type: String,
    /// Where it was found.
    url: Option<String>,
    /// What held it (`content`, `commit`, `pull_request_description`, ...).
    source: Option<String>,
}

/// The answer for one token.
#[derive(Debug, Serialize, ToSchema)]
#[allow(dead_code)]
pub(crate) struct TokenVerdict {
    token_raw: String,
    token_type: String,
    /// `true_positive`: a key of this instance, live when first reported (the configured
    /// action ran then); `false_positive`: no key, or one already disabled, expired or deleted.
    #[schema(pattern = "^(true_positive|false_positive)$")]
    label: String,
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> &'a str {
    req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// A GitHub secret scanning report
///
/// Signed by GitHub (`Github-Public-Key-Identifier`, `Github-Public-Key-Signature`: ECDSA
/// P-256 over the raw body). Each live key reported is disabled, expired or only reported,
/// as the setting `KEYGATE_GITHUB_SCANNING_ACTION` says, with the `key.leaked` audit event
/// and webhook; a token reported again changes nothing more.
#[utoipa::path(post, path = "/v1/secret-scanning/github", operation_id = "secretScanning.github",
    tag = "keys", security(()),
    params(
        ("Github-Public-Key-Identifier" = String, Header, description = "The key that signed the body"),
        ("Github-Public-Key-Signature" = String, Header, description = "Base64 of the DER ECDSA signature"),
    ),
    request_body = Vec<ReportedToken>,
    responses((status = 200, description = "One verdict per token", body = Vec<TokenVerdict>), V1BodyErrors))]
pub async fn github(
    req: HttpRequest,
    payload: web::Payload,
    st: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(&req, payload.into_inner()).await?;
    let identifier = header(&req, "github-public-key-identifier").to_string();
    let signature = header(&req, "github-public-key-signature").to_string();
    let queued = st.metrics.queued();
    let verdicts = blocking(queued, move || Ok(st.scanning.report(&identifier, &signature, &body)?)).await?;
    Ok(HttpResponse::Ok().json(verdicts))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(github))]
struct Doc;

/// This room's part of the v1 document.
pub(crate) fn openapi() -> serde_json::Value {
    crate::openapi::room::<Doc>()
}
