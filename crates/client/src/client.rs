//! The HTTP client: one connection pool, the root key, timeouts, retries of transient
//! failures, and the v2 envelope (`{meta: {requestId}, data, pagination?}`) taken apart.

use crate::error::{Error, MetaBody, ProblemBody};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// A client of keygate's v2 API (or Unkey's, where the two overlap). Cheap to clone: clones
/// share one connection pool.
///
/// Every operation is a method named after it (`keys.verifyKey` is
/// [`Client::verify_key`]) taking its request type and answering a [`Response`] of its
/// data type.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    base: String,
    authorization: Option<String>,
    timeout: Duration,
    retries: u32,
    backoff: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base)
            .field("root_key", &self.inner.authorization.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.inner.timeout)
            .field("retries", &self.inner.retries)
            .finish()
    }
}

/// Builds a [`Client`]: [`Client::builder`].
#[derive(Clone)]
pub struct ClientBuilder {
    base: String,
    root_key: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
    retries: u32,
    backoff: Duration,
    user_agent: String,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("base", &self.base)
            .field("root_key", &self.root_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// The root key sent as `Authorization: Bearer` on every call (operations on keys,
    /// permissions, limits... need one; `liveness` does not).
    pub fn root_key(mut self, root_key: impl Into<String>) -> Self {
        self.root_key = Some(root_key.into());
        self
    }

    /// The longest a call may take, retries included (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest a new connection may take to open (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How many times a transient failure is tried again (default 2): a 503 (keygate's
    /// store unreachable: the call changed nothing), a connection that could not be opened.
    /// The waits double from [`Self::backoff`]; a `Retry-After` header is honoured.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// The first wait before a retry (default 100 ms).
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// The `User-Agent` sent (default `keygate-client/<version>`).
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// The client. Fails on a base URL that is not `http://` or `https://`.
    pub fn build(self) -> Result<Client, Error> {
        let base = self.base.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Config(format!("base URL {base:?}: must start with http:// or https://")));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .user_agent(self.user_agent)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| Error::Config(format!("building the HTTP client: {e}")))?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base,
                authorization: self.root_key.map(|k| format!("Bearer {k}")),
                timeout: self.timeout,
                retries: self.retries,
                backoff: self.backoff,
            }),
        })
    }
}

/// An operation's answer: its data, and what the envelope says about the call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Response<T> {
    /// The operation's data.
    pub data: T,
    /// The id keygate gave the request (in its logs and audit events).
    pub request_id: String,
    /// For list operations: where the next page starts.
    pub pagination: Option<Pagination>,
}

impl<T> Response<T> {
    /// The data alone.
    pub fn into_data(self) -> T {
        self.data
    }
}

impl<T> std::ops::Deref for Response<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.data
    }
}

/// An empty answer (`{}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Empty {}

/// Where a list continues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Pagination {
    /// Pass as `cursor` to get the next page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Whether there is a next page.
    pub has_more: bool,
}

/// The wire shape of a success.
#[derive(Deserialize)]
struct Envelope<T> {
    data: T,
    #[serde(default)]
    meta: Option<MetaBody>,
    #[serde(default)]
    pagination: Option<Pagination>,
}

/// The longest `Retry-After` honoured: a longer one is cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

impl Client {
    /// A client of the keygate (or Unkey) at `base_url` (`http://127.0.0.1:8080`; the
    /// `/v2/...` paths are appended) with `root_key` and the default settings.
    pub fn new(base_url: impl Into<String>, root_key: impl Into<String>) -> Result<Self, Error> {
        Self::builder(base_url).root_key(root_key).build()
    }

    /// A builder for the client of `base_url`, to choose the timeouts and retries.
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base: base_url.into(),
            root_key: None,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            retries: 2,
            backoff: Duration::from_millis(100),
            user_agent: concat!("keygate-client/", env!("CARGO_PKG_VERSION")).to_string(),
        }
    }

    /// The base URL calls go to.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// `POST /v2/<operation>` with `body`, its data read as `T`. Every typed method goes
    /// through here; call it for an operation this crate does not know yet.
    pub async fn call<B, T>(&self, operation: &str, body: &B) -> Result<Response<T>, Error>
    where
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let body = serde_json::to_vec(body)
            .map_err(|e| Error::Config(format!("{operation}: the request does not serialize: {e}")))?;
        self.send(reqwest::Method::POST, operation, Some(body)).await
    }

    /// `GET /v2/<operation>` (`liveness`).
    pub(crate) async fn get<T: DeserializeOwned>(&self, operation: &str) -> Result<Response<T>, Error> {
        self.send(reqwest::Method::GET, operation, None).await
    }

    async fn send<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        operation: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Response<T>, Error> {
        let inner = &*self.inner;
        let url = format!("{}/v2/{operation}", inner.base);
        let attempts = async {
            let mut attempt = 0;
            loop {
                let mut req = inner.http.request(method.clone(), &url);
                if let Some(auth) = &inner.authorization {
                    req = req.header(http::header::AUTHORIZATION, auth);
                }
                if let Some(body) = &body {
                    req = req.header(http::header::CONTENT_TYPE, "application/json").body(body.clone());
                }
                let (out, retry_after) = match req.send().await {
                    Ok(resp) => {
                        let retry_after = resp
                            .headers()
                            .get(http::header::RETRY_AFTER)
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.trim().parse::<u64>().ok())
                            .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
                        (read(resp).await, retry_after)
                    }
                    Err(e) => (Err(Error::Transport(e)), None),
                };
                match out {
                    Err(e) if attempt < inner.retries && e.is_transient() => {
                        let wait = retry_after.unwrap_or(inner.backoff * 2u32.saturating_pow(attempt));
                        log::debug!("keygate {operation}: {e}; trying again in {wait:?}");
                        tokio::time::sleep(wait).await;
                        attempt += 1;
                    }
                    out => return out,
                }
            }
        };
        tokio::time::timeout(inner.timeout, attempts).await.unwrap_or(Err(Error::Timeout(inner.timeout)))
    }
}

/// An answer taken apart: the envelope's data, or the problem details.
async fn read<T: DeserializeOwned>(resp: reqwest::Response) -> Result<Response<T>, Error> {
    let status = resp.status().as_u16();
    let header_id = resp
        .headers()
        .get("x-request-id")
        .or_else(|| resp.headers().get("unkey-request-id"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = resp.bytes().await.map_err(Error::Transport)?;
    let decode = |message: String| Error::Decode { status, message, request_id: header_id.clone() };
    if (200..300).contains(&status) {
        let env: Envelope<T> = serde_json::from_slice(&bytes).map_err(|e| decode(e.to_string()))?;
        let request_id = env.meta.map(|m| m.request_id).or(header_id.clone()).unwrap_or_default();
        return Ok(Response { data: env.data, request_id, pagination: env.pagination });
    }
    match serde_json::from_slice::<ProblemBody>(&bytes) {
        Ok(p) => {
            let mut error = p.error;
            error.status = status;
            error.request_id = p.meta.map(|m| m.request_id).or(header_id).unwrap_or_default();
            Err(Error::Api(Box::new(error)))
        }
        Err(_) => Err(decode(format!(
            "not a problem-details body: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ))),
    }
}
