//! What one decision reads and writes in the Redis store: the reads and
//! queued writes of a [`RedisTx`], and the [`LedgerTx`] every front-end
//! decides through.

use budgetgate_core::budget::Ledger;
use redis::{Commands, Connection, Pipeline};

use super::{key, unique, RedisTx};
use crate::store::{CountedUsage, LedgerTx, StoreError, TranscriptCursor};

impl RedisTx<'_> {
    fn fail(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Redis {
            url: self.url.to_owned(),
            detail: e.to_string(),
        }
    }

    pub(super) fn read<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.borrow_mut();
        f(&mut conn).map_err(|e| self.fail(e))
    }

    pub(super) fn write(&self, f: impl FnOnce(&mut Pipeline)) {
        f(&mut self.writes.borrow_mut());
    }

    /// Field `field` of hash `hash` as this transaction sees it: as it set
    /// it, else as the server has it.
    fn hget_own(&self, hash: String, field: &str) -> Result<Option<String>, StoreError> {
        if let Some(value) = self.written.borrow().get(&(hash.clone(), field.to_owned())) {
            return Ok(Some(value.clone()));
        }
        self.read(|c| c.hget(&hash, field))
    }

    /// Sets field `field` of hash `hash` at `EXEC`; this transaction reads
    /// it at once ([`Self::hget_own`]).
    fn hset_own(&self, hash: String, field: &str, value: String) {
        self.write(|p| {
            p.hset(&hash, field, &value).ignore();
        });
        self.written
            .borrow_mut()
            .insert((hash, field.to_owned()), value);
    }

    /// Deletes reservation `field` of `hash` at `EXEC`, and remembers it
    /// as taken for the rest of this transaction.
    fn take(&self, hash: String, field: String) {
        self.write(|p| {
            p.hdel(&hash, &field).ignore();
        });
        self.taken.borrow_mut().push((hash, field));
    }

    /// Whether this transaction has taken reservation `field` of `hash`.
    fn was_taken(&self, hash: &str, field: &str) -> bool {
        self.taken
            .borrow()
            .iter()
            .any(|(h, f)| h == hash && f == field)
    }
}

impl LedgerTx for RedisTx<'_> {
    fn ledger(&self, session: &str, agent: &str) -> Result<Option<Ledger>, StoreError> {
        let bytes: Option<Vec<u8>> = self.read(|c| c.hget(key(session, "ledger"), agent))?;
        bytes
            .map(|b| {
                Ledger::from_record(&b).map_err(|source| StoreError::Record {
                    path: self.url.to_owned(),
                    session: session.to_owned(),
                    source,
                })
            })
            .transpose()
    }

    fn put_ledger(
        &self,
        session: &str,
        agent: &str,
        ledger: &Ledger,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let record = ledger.to_record();
        let bytes = record.as_bytes().to_vec();
        self.write(|p| {
            p.hset(key(session, "ledger"), agent, bytes).ignore();
            p.hset(key(session, "updated"), agent, now_ms).ignore();
        });
        Ok(())
    }

    fn call(&self, session: &str, call_id: &str) -> Result<Option<(u128, String)>, StoreError> {
        let value: Option<String> = self.read(|c| c.hget(key(session, "calls"), call_id))?;
        value
            .map(|v| {
                let (fp, answer) = v
                    .split_once(' ')
                    .ok_or_else(|| StoreError::Answer(v.chars().take(80).collect()))?;
                let fp = u128::from_str_radix(fp, 16)
                    .map_err(|_| StoreError::Answer(v.chars().take(80).collect()))?;
                Ok((fp, answer.to_owned()))
            })
            .transpose()
    }

    fn put_call(
        &self,
        session: &str,
        call_id: &str,
        fingerprint: u128,
        answer: &str,
    ) -> Result<(), StoreError> {
        let value = format!("{fingerprint:032x} {answer}");
        self.write(|p| {
            p.hset(key(session, "calls"), call_id, value).ignore();
        });
        Ok(())
    }

    fn has_traces(&self, session: &str) -> Result<bool, StoreError> {
        self.read(|c| c.exists(key(session, "calls")))
    }

    fn raise_repeat(&self, session: &str, fingerprint: u128) -> Result<u64, StoreError> {
        let field = format!("{fingerprint:032x}");
        let count: Option<u64> = self.read(|c| c.hget(key(session, "repeats"), &field))?;
        let count = count.unwrap_or(0) + 1;
        self.write(|p| {
            p.hset(key(session, "repeats"), field, count).ignore();
        });
        Ok(count)
    }

    fn unpriced(&self, session: &str) -> Result<Option<String>, StoreError> {
        let models: Vec<String> = self.read(|c| c.smembers(key(session, "unpriced")))?;
        Ok(models.into_iter().min())
    }

    fn log(&self, at_ms: u64, session: &str, action: &str, detail: &str) -> Result<(), StoreError> {
        let line = serde_json::json!({"at_ms": at_ms, "session": session,
            "action": action, "detail": detail})
        .to_string();
        self.write(|p| {
            p.rpush(key(session, "log"), line).ignore();
        });
        Ok(())
    }

    fn put_reservation(
        &self,
        session: &str,
        key_: &str,
        tool: &str,
        expires_ms: u64,
    ) -> Result<(), StoreError> {
        let value = format!("{expires_ms} {tool}");
        self.write(|p| {
            p.hset(key(session, "resv"), key_, value).ignore();
        });
        Ok(())
    }

    fn take_reservation(&self, session: &str, key_: &str) -> Result<Option<String>, StoreError> {
        let hash = key(session, "resv");
        if self.was_taken(&hash, key_) {
            return Ok(None);
        }
        let value: Option<String> = self.read(|c| c.hget(&hash, key_))?;
        let Some(value) = value else {
            return Ok(None);
        };
        self.take(hash, key_.to_owned());
        Ok(value.split_once(' ').map(|(_, tool)| tool.to_owned()))
    }

    fn take_expired_reservations(
        &self,
        session: &str,
        now_ms: u64,
    ) -> Result<Vec<String>, StoreError> {
        let hash = key(session, "resv");
        let all: Vec<(String, String)> = self.read(|c| c.hgetall(&hash))?;
        let mut tools = Vec::new();
        for (k, v) in all {
            let Some((expires, tool)) = v.split_once(' ') else {
                continue;
            };
            if expires.parse::<u64>().is_ok_and(|e| e <= now_ms) && !self.was_taken(&hash, &k) {
                tools.push(tool.to_owned());
                self.take(hash.clone(), k);
            }
        }
        Ok(tools)
    }

    fn add_rate_call(&self, session: &str, at_ms: u64, keep_ms: u64) -> Result<(), StoreError> {
        let rate = key(session, "rate");
        // A member unique per call: calls in the same millisecond all count.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let member = format!("{at_ms}-{}-{nanos}-{}", std::process::id(), unique());
        let oldest = at_ms.saturating_sub(keep_ms);
        self.write(|p| {
            p.zrembyscore(&rate, "-inf", format!("({oldest}")).ignore();
            p.zadd(&rate, member, at_ms).ignore();
        });
        Ok(())
    }

    fn rate_calls_after(
        &self,
        session: &str,
        since_ms: u64,
    ) -> Result<(u64, Option<u64>), StoreError> {
        let rate = key(session, "rate");
        let min = format!("({since_ms}");
        let count: u64 = self.read(|c| c.zcount(&rate, &min, "+inf"))?;
        let first: Vec<(String, u64)> =
            self.read(|c| c.zrangebyscore_limit_withscores(&rate, &min, "+inf", 0, 1))?;
        Ok((count, first.first().map(|(_, at)| *at)))
    }

    fn clock_ms(&self) -> Option<u64> {
        Some(self.clock_ms)
    }

    /// A transcript's cursor is one field of the session's `offsets` hash:
    /// the offset, then, when a response is open, a space and its record
    /// (a ledger written before the record was kept holds the offset
    /// alone, read as no open response).
    fn transcript_cursor(&self, session: &str, path: &str) -> Result<TranscriptCursor, StoreError> {
        let value = self.hget_own(key(session, "offsets"), path)?;
        let Some(value) = value else {
            return Ok(TranscriptCursor::default());
        };
        let (offset, open) = match value.split_once(' ') {
            Some((offset, open)) => (offset, Some(open.to_owned())),
            None => (value.as_str(), None),
        };
        let offset = offset.parse().map_err(|_| StoreError::TranscriptCursor {
            session: session.to_owned(),
            path: path.to_owned(),
            value: value.clone(),
        })?;
        Ok(TranscriptCursor { offset, open })
    }

    fn set_transcript_cursor(
        &self,
        session: &str,
        path: &str,
        cursor: &TranscriptCursor,
    ) -> Result<(), StoreError> {
        let value = match &cursor.open {
            Some(open) => format!("{} {open}", cursor.offset),
            None => cursor.offset.to_string(),
        };
        self.hset_own(key(session, "offsets"), path, value);
        Ok(())
    }

    fn transcript_call(&self, session: &str, call_id: &str) -> Result<Option<String>, StoreError> {
        self.hget_own(key(session, "tcalls"), call_id)
    }

    fn put_transcript_call(
        &self,
        session: &str,
        call_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        self.hset_own(key(session, "tcalls"), call_id, message_id.to_owned());
        Ok(())
    }

    fn response(&self, session: &str, key_: &str) -> Result<Option<CountedUsage>, StoreError> {
        let value = self.hget_own(key(session, "responses"), key_)?;
        value
            .map(|v| {
                let bad = || StoreError::Answer(v.chars().take(80).collect());
                let v: serde_json::Value = serde_json::from_str(&v).map_err(|_| bad())?;
                let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).ok_or_else(bad);
                Ok(CountedUsage {
                    input: n("input")?,
                    output: n("output")?,
                    cache_read: n("cache_read")?,
                    cache_write: n("cache_write")?,
                })
            })
            .transpose()
    }

    fn put_response(
        &self,
        session: &str,
        key_: &str,
        agent: &str,
        model: &str,
        usage: CountedUsage,
    ) -> Result<(), StoreError> {
        let value = serde_json::json!({"agent": agent, "model": model,
            "input": usage.input, "output": usage.output,
            "cache_read": usage.cache_read, "cache_write": usage.cache_write})
        .to_string();
        self.hset_own(key(session, "responses"), key_, value);
        Ok(())
    }

    fn add_unpriced(&self, session: &str, model: &str) -> Result<(), StoreError> {
        self.write(|p| {
            p.sadd(key(session, "unpriced"), model).ignore();
        });
        Ok(())
    }

    fn loop_window(&self, session: &str, agent: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(|c| c.hget(key(session, "loops"), agent))
    }

    fn put_loop_window(&self, session: &str, agent: &str, record: &[u8]) -> Result<(), StoreError> {
        let record = record.to_vec();
        self.write(|p| {
            p.hset(key(session, "loops"), agent, record).ignore();
        });
        Ok(())
    }
}
