//! A real S3-compatible server (`s3s-fs`), in process on a loopback port,
//! for the archive tests and bench: nothing to start by hand.
#![allow(dead_code)]

use std::path::PathBuf;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::service::S3ServiceBuilder;

/// The server, with one bucket; stopped when dropped.
pub struct S3Server {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The bucket the server holds.
    pub bucket: String,
    dir: tempfile::TempDir,
    runtime: Option<tokio::runtime::Runtime>,
}

impl S3Server {
    /// Starts a server on an ephemeral loopback port, its objects in a
    /// temporary directory.
    pub fn start() -> S3Server {
        let dir = tempfile::tempdir().unwrap();
        let bucket = "archive".to_string();
        std::fs::create_dir(dir.path().join(&bucket)).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let fs = s3s_fs::FileSystem::new(dir.path()).unwrap();
        let mut service = S3ServiceBuilder::new(fs);
        // Requests are signed, as against S3, and checked.
        service.set_auth(s3s::auth::SimpleAuth::from_single("test", "test-secret"));
        let service = service.build();
        runtime.spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let service = service.clone();
                tokio::spawn(async move {
                    let _ = ConnBuilder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(socket), service)
                        .await;
                });
            }
        });
        S3Server {
            endpoint,
            bucket,
            dir,
            runtime: Some(runtime),
        }
    }

    /// `s3://<bucket>/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// The `object_store` options that point a client at this server.
    pub fn options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_endpoint", self.endpoint.clone()),
            ("aws_allow_http", "true".into()),
            ("aws_access_key_id", "test".into()),
            ("aws_secret_access_key", "test-secret".into()),
            ("aws_region", "us-east-1".into()),
        ]
    }

    /// The same, as the `AWS_*` environment of a process (the CLI).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test-secret".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// The file that holds an object, for tests that damage one.
    pub fn object_file(&self, key: &str) -> PathBuf {
        self.dir.path().join(&self.bucket).join(key)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
