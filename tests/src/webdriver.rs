//! A small W3C WebDriver client for the dashboard's browser tests: a headless Chromium
//! driven by Debian's `chromedriver` (started here, on a free port, killed on drop), over
//! the protocol's JSON (no client crate needed for the handful of commands used).

use keygate_test_support::{Proc, free_port};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

/// The Enter key, as WebDriver's `sendKeys` writes it.
pub const ENTER: &str = "\u{E007}";

/// A browser session.
pub struct Browser {
    _driver: Proc,
    base: String,
    session: String,
    http: reqwest::blocking::Client,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").field("session", &self.session).finish_non_exhaustive()
    }
}

/// An element of the page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// Starts `chromedriver` and a headless Chromium session (browser logs kept, to read the
    /// console). Panics when either is missing: `.ci/run` installs them.
    pub fn start() -> Self {
        let port = free_port();
        let mut cmd = Command::new(std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into()));
        cmd.arg(format!("--port={port}"));
        let driver = Proc::spawn(cmd);
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while http.get(format!("{base}/status")).send().is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start (is chromium-driver installed?)");
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1280,900"]},
            "goog:loggingPrefs": {"browser": "ALL"}
        }}});
        let res: Value = http.post(format!("{base}/session")).json(&caps).send().unwrap().json().unwrap();
        let session =
            res["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {res}")).to_string();
        Self { _driver: driver, base, session, http }
    }

    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let req = self.http.request(method, url);
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        let res: Value = req.send().unwrap().json().unwrap();
        if let Some(e) = res["value"].get("error") {
            panic!("webdriver {path}: {e}: {}", res["value"]["message"]);
        }
        res["value"].clone()
    }

    fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, Some(body))
    }

    fn get(&self, path: &str) -> Value {
        self.call(reqwest::Method::GET, path, None)
    }

    pub fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url }));
    }

    pub fn url(&self) -> String {
        self.get("/url").as_str().unwrap_or_default().to_string()
    }

    pub fn source(&self) -> String {
        self.get("/source").as_str().unwrap_or_default().to_string()
    }

    /// The first element `css` selects.
    pub fn find(&self, css: &str) -> Element {
        let v = self.post("/element", json!({"using": "css selector", "value": css}));
        Element(v.as_object().and_then(|o| o.values().next()).and_then(Value::as_str).unwrap().to_string())
    }

    /// Every element `css` selects.
    pub fn find_all(&self, css: &str) -> Vec<Element> {
        let v = self.post("/elements", json!({"using": "css selector", "value": css}));
        v.as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e.as_object().and_then(|o| o.values().next()).and_then(Value::as_str))
            .map(|id| Element(id.to_string()))
            .collect()
    }

    /// The element that has the focus.
    pub fn active(&self) -> Element {
        let v = self.get("/element/active");
        Element(v.as_object().and_then(|o| o.values().next()).and_then(Value::as_str).unwrap().to_string())
    }

    pub fn type_into(&self, e: &Element, text: &str) {
        self.post(&format!("/element/{}/value", e.0), json!({ "text": text }));
    }

    pub fn click(&self, e: &Element) {
        self.post(&format!("/element/{}/click", e.0), json!({}));
    }

    pub fn attribute(&self, e: &Element, name: &str) -> Option<String> {
        self.get(&format!("/element/{}/attribute/{name}", e.0)).as_str().map(str::to_string)
    }

    /// The result of a script run in the page (`return ...;`).
    pub fn script(&self, body: &str) -> Value {
        self.post("/execute/sync", json!({"script": body, "args": []}))
    }

    /// The page as a PNG.
    pub fn screenshot(&self) -> Vec<u8> {
        let b64 = self.get("/screenshot");
        decode_base64(b64.as_str().unwrap())
    }

    /// The console's messages since the last call: `(level, message)`.
    pub fn console(&self) -> Vec<(String, String)> {
        let v = self.post("/se/log", json!({"type": "browser"}));
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|m| {
                        (
                            m["level"].as_str().unwrap_or("").to_string(),
                            m["message"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.http.delete(format!("{}/session/{}", self.base, self.session)).send();
    }
}

fn decode_base64(s: &str) -> Vec<u8> {
    let table = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for v in s.bytes().filter_map(table) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
