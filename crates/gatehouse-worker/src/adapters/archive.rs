//! The [`Archive`] port over R2 (`ARCHIVE`): each audit object is written whole, one gzip member,
//! in one put; a session-recording segment is its JSON as sent. Compression uses the runtime's own `CompressionStream`, so no deflate implementation
//! is compiled into the wasm.

use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::{Bucket, HttpMetadata};

use crate::adapters::deadline::within;
use gatehouse_core::platform::deadline;
use gatehouse_core::ports::{Archive, ArchiveObject, PortError, StoredObject};

pub const BINDING: &str = "ARCHIVE";

#[wasm_bindgen(inline_js = r#"
export async function gzip(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}
export async function gunzip(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}"#)]
extern "C" {
    #[wasm_bindgen(catch)]
    async fn gzip(bytes: &[u8]) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(catch)]
    async fn gunzip(bytes: &[u8]) -> Result<JsValue, JsValue>;
}

pub struct R2Archive {
    bucket: Bucket,
}

impl R2Archive {
    pub fn new(bucket: Bucket) -> Self {
        Self { bucket }
    }

    /// Writes `bytes` as they are under `key`, replacing any object there.
    async fn put_as(&self, key: &str, bytes: &[u8], content_type: &str) -> Result<(), PortError> {
        let metadata = HttpMetadata { content_type: Some(content_type.into()), ..Default::default() };
        let put = self.bucket.put(key, bytes.to_vec()).http_metadata(metadata).execute();
        within(deadline::R2_MS, "R2 put", async { put.await.map(drop).map_err(PortError::from_display) })
            .await
    }
}

fn js_error(e: JsValue) -> PortError {
    PortError(format!("{e:?}"))
}

impl Archive for R2Archive {
    async fn seal(&self, ndjson: &[u8]) -> Result<Vec<u8>, PortError> {
        Ok(js_sys::Uint8Array::new(&gzip(ndjson).await.map_err(js_error)?).to_vec())
    }

    async fn put(&self, key: &str, sealed: &[u8]) -> Result<(), PortError> {
        self.put_as(key, sealed, "application/gzip").await
    }

    async fn put_digest(&self, key: &str, json: &[u8]) -> Result<(), PortError> {
        self.put_as(key, json, "application/json").await
    }

    async fn put_recording_segment(&self, key: &str, json: &[u8]) -> Result<(), PortError> {
        self.put_as(key, json, "application/json").await
    }

    async fn put_usage(&self, key: &str, ndjson: &[u8]) -> Result<(), PortError> {
        self.put_as(key, ndjson, "application/x-ndjson").await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ArchiveObject>, PortError> {
        let mut objects = Vec::new();
        let mut cursor = None;
        loop {
            let mut request = self.bucket.list().prefix(prefix);
            if let Some(c) = cursor {
                request = request.cursor(c);
            }
            let listed = request.execute();
            let page =
                within(deadline::R2_MS, "R2 list", async { listed.await.map_err(PortError::from_display) })
                    .await?;
            objects.extend(page.objects().iter().map(|o| ArchiveObject {
                key: o.key(),
                size: o.size(),
                uploaded_ms: o.uploaded().as_millis() as i64,
            }));
            match page.cursor() {
                Some(c) if page.truncated() => cursor = Some(c),
                _ => return Ok(objects),
            }
        }
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, PortError> {
        let read = async {
            let Some(object) = self.bucket.get(key).execute().await.map_err(PortError::from_display)? else {
                return Ok(None);
            };
            match object.body() {
                Some(body) => Ok(Some(body.bytes().await.map_err(PortError::from_display)?)),
                None => Ok(Some(Vec::new())),
            }
        };
        within(deadline::R2_MS, "R2 get", read).await
    }

    async fn read_ndjson(&self, key: &str) -> Result<Option<Vec<u8>>, PortError> {
        let Some(member) = self.get(key).await? else { return Ok(None) };
        Ok(Some(js_sys::Uint8Array::new(&gunzip(&member).await.map_err(js_error)?).to_vec()))
    }

    async fn read_stored(&self, key: &str) -> Result<Option<StoredObject>, PortError> {
        let Some(member) = self.get(key).await? else { return Ok(None) };
        let ndjson = gunzip(&member).await.ok().map(|b| js_sys::Uint8Array::new(&b).to_vec());
        Ok(Some(StoredObject { sha256: gatehouse_core::digest::sha256_hex(&member), ndjson }))
    }
}
