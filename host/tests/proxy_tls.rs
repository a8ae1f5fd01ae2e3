//! `budgetgate proxy` in front of an HTTPS upstream (issue 31, TLS): a
//! scripted model API served over TLS with a private CA
//! (tests/proxy/tls_upstream.py), reached with `--upstream-ca`, refused
//! without it or under another name, and a CA file that is not PEM
//! stopping the proxy at start.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::json;

mod common;
use common::upstream::*;
use common::ProxyProcess as Proxy;

/// The HTTPS scripted upstream (tests/proxy/tls_upstream.py), killed when
/// dropped.
struct TlsUpstream {
    child: Child,
    port: u16,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_tls_upstream(cert: &Path, key: &Path) -> TlsUpstream {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/proxy/tls_upstream.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(cert)
        .arg(key)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("port");
    let port = line.trim().parse().expect("a port");
    TlsUpstream { child, port }
}

fn start_proxy_at(url: &str, budget: &Path, ledger: &Path, extra: &[&str]) -> Proxy {
    Proxy::start(url, budget, ledger, extra)
}

#[test]
fn an_https_upstream_is_reached_with_its_ca_and_refused_without_it_or_by_another_name() {
    let dir = tempfile::tempdir().expect("dir");
    let (ca, cert, key) = common::tls::test_ca(dir.path());
    let upstream = start_tls_upstream(&cert, &key);
    let budget = write_budget(dir.path(), "[budget]\nmax_tokens = 100000\n");
    let ledger = dir.path().join("ledger.sqlite3");
    let url = format!("https://127.0.0.1:{}", upstream.port);
    let ca_arg = ca.display().to_string();
    let trusted = start_proxy_at(&url, &budget, &ledger, &["--upstream-ca", &ca_arg]);
    let a = post(trusted.port, "/v1/messages", &[], &messages(false));
    assert_eq!(
        (a.status, a.json()["content"][0]["text"].clone()),
        (200, json!("over tls")),
        "{}",
        a.text()
    );
    assert_eq!(
        used(&settled_row(&ledger, "proxy"), "tokens"),
        INPUT + OUTPUT
    );

    // Without the CA: the certificate is not trusted; the call was not made.
    let untrusted = start_proxy_at(&url, &budget, &ledger, &[]);
    let a = post(untrusted.port, "/v1/messages", &[], &messages(false));
    assert_eq!(a.status, 502, "{}", a.text());
    let message = a.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(message.to_lowercase().contains("certificate"), "{message}");

    // With the CA but another host name than the certificate's.
    let other = format!("https://localhost:{}", upstream.port);
    let renamed = start_proxy_at(&other, &budget, &ledger, &["--upstream-ca", &ca_arg]);
    let a = post(renamed.port, "/v1/messages", &[], &messages(false));
    assert_eq!(a.status, 502, "{}", a.text());
    let message = a.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(message.to_lowercase().contains("certificate"), "{message}");
    // Neither failed call counted (not billed: never reached the model).
    let row = settled_row(&ledger, "proxy");
    assert_eq!(
        (used(&row, "tokens"), used(&row, "model_calls")),
        (INPUT + OUTPUT, 1)
    );
}

#[test]
fn a_ca_file_that_is_not_pem_stops_the_proxy_at_start() {
    let dir = tempfile::tempdir().expect("dir");
    let bad = dir.path().join("ca.pem");
    std::fs::write(&bad, "not a certificate").expect("file");
    let out = Command::new(env!("CARGO_BIN_EXE_budgetgate"))
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "https://127.0.0.1:1",
            "--upstream-ca",
        ])
        .arg(&bad)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--upstream-ca") && err.contains("no PEM certificate"),
        "{err}"
    );
}
