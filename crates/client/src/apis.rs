//! `apis.*`: the API objects keys belong to (API-v2.md §10).

use crate::client::{Client, Empty, Response};
use crate::error::Error;
use crate::keys::Key;
use serde::{Deserialize, Serialize};

/// An API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Api {
    /// Its id (`api_...`).
    pub id: String,
    /// Its name.
    pub name: String,
}

/// `apis.createApi`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CreateApiRequest {
    /// Its name (3–255).
    pub name: String,
}

/// `apis.createApi`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CreatedApi {
    /// The new API's id.
    pub api_id: String,
}

/// `apis.getApi`, `apis.deleteApi`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiRequest {
    /// The API's id.
    pub api_id: String,
}

/// `apis.listKeys`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListKeysRequest {
    /// The API's id.
    pub api_id: String,
    /// Page size (1–100, default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Where the page starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Only the keys of this identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
}

impl Client {
    /// `apis.createApi`.
    pub async fn create_api(&self, req: &CreateApiRequest) -> Result<Response<CreatedApi>, Error> {
        self.call("apis.createApi", req).await
    }

    /// `apis.getApi`.
    pub async fn get_api(&self, req: &ApiRequest) -> Result<Response<Api>, Error> {
        self.call("apis.getApi", req).await
    }

    /// `apis.deleteApi`: the API and every key in it.
    pub async fn delete_api(&self, req: &ApiRequest) -> Result<Response<Empty>, Error> {
        self.call("apis.deleteApi", req).await
    }

    /// `apis.listKeys`: a page of an API's keys, ordered by id.
    pub async fn list_keys(&self, req: &ListKeysRequest) -> Result<Response<Vec<Key>>, Error> {
        self.call("apis.listKeys", req).await
    }
}
