//! What one decision reads and writes in the SQLite store: the statements
//! of a [`Tx`], and the [`LedgerTx`] every front-end decides through.

use budgetgate_core::budget::Ledger;
use rusqlite::{params, OptionalExtension};

use super::{to_i64, to_u64, Tx};
use crate::store::{CountedUsage, LedgerTx, StoreError, TranscriptCursor};

impl LedgerTx for Tx<'_> {
    fn transcript_cursor(&self, session: &str, path: &str) -> Result<TranscriptCursor, StoreError> {
        Tx::cursor(self, session, path)
    }
    fn set_transcript_cursor(
        &self,
        session: &str,
        path: &str,
        cursor: &TranscriptCursor,
    ) -> Result<(), StoreError> {
        Tx::set_cursor(self, session, path, cursor)
    }
    fn response(&self, session: &str, key: &str) -> Result<Option<CountedUsage>, StoreError> {
        Tx::response(self, session, key)
    }
    fn transcript_call(&self, session: &str, call_id: &str) -> Result<Option<String>, StoreError> {
        self.row(
            "SELECT message_id FROM transcript_calls WHERE session = ?1 AND call_id = ?2",
            params![session, call_id],
            |r| r.get(0),
        )
        .optional()
        .map_err(self.sql())
    }
    fn put_transcript_call(
        &self,
        session: &str,
        call_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO transcript_calls (session, call_id, message_id) VALUES (?1, ?2, ?3)
                 ON CONFLICT (session, call_id) DO UPDATE SET message_id = ?3",
            params![session, call_id, message_id],
        )
        .map_err(self.sql())?;
        Ok(())
    }
    fn put_response(
        &self,
        session: &str,
        key: &str,
        agent: &str,
        model: &str,
        usage: CountedUsage,
    ) -> Result<(), StoreError> {
        Tx::put_response(self, session, key, agent, model, usage)
    }
    fn add_unpriced(&self, session: &str, model: &str) -> Result<(), StoreError> {
        Tx::add_unpriced(self, session, model)
    }
    fn loop_window(&self, session: &str, agent: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.row(
            "SELECT record FROM loop_windows WHERE session = ?1 AND agent = ?2",
            [session, agent],
            |r| r.get(0),
        )
        .optional()
        .map_err(self.sql())
    }
    fn put_loop_window(&self, session: &str, agent: &str, record: &[u8]) -> Result<(), StoreError> {
        self.exec(
            "INSERT OR REPLACE INTO loop_windows (session, agent, record) VALUES (?1, ?2, ?3)",
            params![session, agent, record],
        )
        .map_err(self.sql())?;
        Ok(())
    }
    fn ledger(&self, session: &str, agent: &str) -> Result<Option<Ledger>, StoreError> {
        Tx::ledger(self, session, agent)
    }
    fn put_ledger(
        &self,
        session: &str,
        agent: &str,
        ledger: &Ledger,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        Tx::put_ledger(self, session, agent, ledger, now_ms)
    }
    fn call(&self, session: &str, call_id: &str) -> Result<Option<(u128, String)>, StoreError> {
        Tx::call(self, session, call_id)
    }
    fn put_call(
        &self,
        session: &str,
        call_id: &str,
        fingerprint: u128,
        answer: &str,
    ) -> Result<(), StoreError> {
        Tx::put_call(self, session, call_id, fingerprint, answer)
    }
    fn has_traces(&self, session: &str) -> Result<bool, StoreError> {
        Tx::has_traces(self, session)
    }
    fn raise_repeat(&self, session: &str, fingerprint: u128) -> Result<u64, StoreError> {
        Tx::raise_repeat(self, session, fingerprint)
    }
    fn unpriced(&self, session: &str) -> Result<Option<String>, StoreError> {
        Tx::unpriced(self, session)
    }
    fn log(&self, at_ms: u64, session: &str, action: &str, detail: &str) -> Result<(), StoreError> {
        Tx::log(self, at_ms, session, action, detail)
    }
    fn put_reservation(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        expires_ms: u64,
    ) -> Result<(), StoreError> {
        Tx::put_reservation(self, session, key, tool, expires_ms)
    }
    fn take_reservation(&self, session: &str, key: &str) -> Result<Option<String>, StoreError> {
        Tx::take_reservation(self, session, key)
    }
    fn take_expired_reservations(
        &self,
        session: &str,
        now_ms: u64,
    ) -> Result<Vec<String>, StoreError> {
        Tx::take_expired_reservations(self, session, now_ms)
    }
    fn add_rate_call(&self, session: &str, at_ms: u64, keep_ms: u64) -> Result<(), StoreError> {
        Tx::add_rate_call(self, session, at_ms, keep_ms)
    }
    fn rate_calls_after(
        &self,
        session: &str,
        since_ms: u64,
    ) -> Result<(u64, Option<u64>), StoreError> {
        Tx::rate_calls_after(self, session, since_ms)
    }
}

impl Tx<'_> {
    /// Runs `sql` with a statement cached on the connection: a gateway
    /// decides many calls on one connection, and preparing each statement
    /// anew was most of a decision's time.
    fn exec(&self, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize> {
        self.tx.prepare_cached(sql)?.execute(params)
    }

    /// [`Self::exec`] for a query of one row.
    fn row<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.tx.prepare_cached(sql)?.query_row(params, f)
    }

    pub(super) fn sql(&self) -> impl Fn(rusqlite::Error) -> StoreError + use<'_> {
        let path = self.path.clone();
        move |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        }
    }

    /// The ledger of `session` / `agent` (`""` for the session itself), if
    /// one is stored. A record that does not decode is an error.
    pub fn ledger(&self, session: &str, agent: &str) -> Result<Option<Ledger>, StoreError> {
        let record: Option<Vec<u8>> = self
            .row(
                "SELECT record FROM ledgers WHERE session = ?1 AND agent = ?2",
                params![session, agent],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sql())?;
        record
            .map(|bytes| {
                Ledger::from_record(&bytes).map_err(|source| StoreError::Record {
                    path: self.path.clone(),
                    session: session.to_owned(),
                    source,
                })
            })
            .transpose()
    }

    /// Stores the ledger of `session` / `agent`.
    pub fn put_ledger(
        &self,
        session: &str,
        agent: &str,
        ledger: &Ledger,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO ledgers (session, agent, record, updated_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session, agent) DO UPDATE SET record = ?3, updated_ms = ?4",
            params![
                session,
                agent,
                ledger.to_record().as_bytes(),
                to_i64(now_ms)
            ],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// The fingerprint and the stored answer of `call_id` in `session`, if
    /// it was decided before.
    pub fn call(&self, session: &str, call_id: &str) -> Result<Option<(u128, String)>, StoreError> {
        self.row(
            "SELECT fingerprint, answer FROM call_ids WHERE session = ?1 AND call_id = ?2",
            params![session, call_id],
            |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, String>(1)?)),
        )
        .optional()
        .map_err(self.sql())
        .map(|found| {
            found.map(|(fp, answer)| {
                let mut bytes = [0u8; 16];
                if let Some(src) = fp.get(..16) {
                    bytes.copy_from_slice(src);
                }
                (u128::from_le_bytes(bytes), answer)
            })
        })
    }

    /// Remembers `call_id` for `session` with the call's fingerprint and the
    /// answer given (so the same call seen again gets the same answer).
    pub fn put_call(
        &self,
        session: &str,
        call_id: &str,
        fingerprint: u128,
        answer: &str,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO call_ids (session, call_id, fingerprint, answer) VALUES (?1, ?2, ?3, ?4)",
            params![session, call_id, &fingerprint.to_le_bytes()[..], answer],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// Whether `session` has any state beside its ledger (transcript
    /// offsets, counted responses, call ids): a session with such state
    /// but no ledger has lost its ledger, which is corruption, not a new
    /// session.
    pub fn has_traces(&self, session: &str) -> Result<bool, StoreError> {
        self.row(
            "SELECT EXISTS (SELECT 1 FROM transcripts WHERE session = ?1)
                 OR EXISTS (SELECT 1 FROM responses WHERE session = ?1)
                 OR EXISTS (SELECT 1 FROM call_ids WHERE session = ?1)",
            [session],
            |r| r.get(0),
        )
        .map_err(self.sql())
    }

    /// Raises the count of `fingerprint` in `session` by one and returns it.
    pub fn raise_repeat(&self, session: &str, fingerprint: u128) -> Result<u64, StoreError> {
        let key = fingerprint.to_le_bytes();
        let count: i64 = self
            .row(
                "INSERT INTO repeats (session, fingerprint, count) VALUES (?1, ?2, 1)
                 ON CONFLICT (session, fingerprint) DO UPDATE SET count = count + 1
                 RETURNING count",
                params![session, &key[..]],
                |r| r.get(0),
            )
            .map_err(self.sql())?;
        Ok(to_u64(count))
    }

    /// How far `path` has been read for `session`, and its open response.
    pub fn cursor(&self, session: &str, path: &str) -> Result<TranscriptCursor, StoreError> {
        let row: Option<(i64, Option<String>)> = self
            .row(
                "SELECT offset, open FROM transcripts WHERE session = ?1 AND path = ?2",
                params![session, path],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(self.sql())?;
        Ok(
            row.map_or_else(TranscriptCursor::default, |(offset, open)| {
                TranscriptCursor {
                    offset: to_u64(offset),
                    open,
                }
            }),
        )
    }

    /// Records how far `path` has been read, and its open response.
    pub fn set_cursor(
        &self,
        session: &str,
        path: &str,
        cursor: &TranscriptCursor,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO transcripts (session, path, offset, open) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session, path) DO UPDATE SET offset = ?3, open = ?4",
            params![session, path, to_i64(cursor.offset), cursor.open],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// The usage counted so far for response `key`, if it was seen.
    pub fn response(&self, session: &str, key: &str) -> Result<Option<CountedUsage>, StoreError> {
        self.row(
            "SELECT input, output, cache_read, cache_write FROM responses
                 WHERE session = ?1 AND key = ?2",
            params![session, key],
            |r| {
                Ok(CountedUsage {
                    input: to_u64(r.get(0)?),
                    output: to_u64(r.get(1)?),
                    cache_read: to_u64(r.get(2)?),
                    cache_write: to_u64(r.get(3)?),
                })
            },
        )
        .optional()
        .map_err(self.sql())
    }

    /// Stores the usage counted for response `key`.
    pub fn put_response(
        &self,
        session: &str,
        key: &str,
        agent: &str,
        model: &str,
        usage: CountedUsage,
    ) -> Result<(), StoreError> {
        self.exec(
                "INSERT INTO responses (session, key, agent, model, input, output, cache_read, cache_write)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (session, key) DO UPDATE SET
                   input = ?5, output = ?6, cache_read = ?7, cache_write = ?8",
                params![
                    session,
                    key,
                    agent,
                    model,
                    to_i64(usage.input),
                    to_i64(usage.output),
                    to_i64(usage.cache_read),
                    to_i64(usage.cache_write)
                ],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    /// Remembers that `model` was used without a price in cost mode.
    pub fn add_unpriced(&self, session: &str, model: &str) -> Result<(), StoreError> {
        self.exec(
            "INSERT OR IGNORE INTO unpriced (session, model) VALUES (?1, ?2)",
            params![session, model],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// A model used without a price in `session`, if any.
    pub fn unpriced(&self, session: &str) -> Result<Option<String>, StoreError> {
        self.row(
            "SELECT model FROM unpriced WHERE session = ?1 ORDER BY model LIMIT 1",
            [session],
            |r| r.get(0),
        )
        .optional()
        .map_err(self.sql())
    }

    /// Stores a reservation of one call of `tool` in `session`, named `key`
    /// (unique in the session), that expires at `expires_ms`.
    pub fn put_reservation(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        expires_ms: u64,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO reservations (session, key, tool, expires_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session, key) DO UPDATE SET tool = ?3, expires_ms = ?4",
            params![session, key, tool, to_i64(expires_ms)],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// Removes the reservation `key` of `session` and returns its tool, if it
    /// is still held (`None`: ended already, or expired and rolled back).
    pub fn take_reservation(&self, session: &str, key: &str) -> Result<Option<String>, StoreError> {
        let tool: Option<String> = self
            .row(
                "DELETE FROM reservations WHERE session = ?1 AND key = ?2 RETURNING tool",
                params![session, key],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sql())?;
        Ok(tool)
    }

    /// Removes every reservation of `session` that expired at or before
    /// `now_ms` and returns their tools (the caller rolls them back).
    pub fn take_expired_reservations(
        &self,
        session: &str,
        now_ms: u64,
    ) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .tx
            .prepare_cached(
                "DELETE FROM reservations WHERE session = ?1 AND expires_ms <= ?2 RETURNING tool",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map(params![session, to_i64(now_ms)], |r| r.get(0))
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// Remembers that a call of `session` was let through at `at_ms`, and
    /// forgets those older than `keep_ms` before it.
    pub fn add_rate_call(&self, session: &str, at_ms: u64, keep_ms: u64) -> Result<(), StoreError> {
        self.exec(
            "DELETE FROM rate_calls WHERE session = ?1 AND at_ms < ?2",
            params![session, to_i64(at_ms.saturating_sub(keep_ms))],
        )
        .map_err(self.sql())?;
        self.exec(
            "INSERT INTO rate_calls (session, at_ms) VALUES (?1, ?2)",
            params![session, to_i64(at_ms)],
        )
        .map_err(self.sql())?;
        Ok(())
    }

    /// How many calls of `session` were let through after `since_ms`, and
    /// the instant of the oldest of them.
    pub fn rate_calls_after(
        &self,
        session: &str,
        since_ms: u64,
    ) -> Result<(u64, Option<u64>), StoreError> {
        let (count, oldest): (i64, Option<i64>) = self
            .row(
                "SELECT COUNT(*), MIN(at_ms) FROM rate_calls WHERE session = ?1 AND at_ms > ?2",
                params![session, to_i64(since_ms)],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(self.sql())?;
        Ok((to_u64(count), oldest.map(to_u64)))
    }

    /// Appends to the ledger's own log.
    pub fn log(
        &self,
        at_ms: u64,
        session: &str,
        action: &str,
        detail: &str,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO log (at_ms, session, action, detail) VALUES (?1, ?2, ?3, ?4)",
            params![to_i64(at_ms), session, action, detail],
        )
        .map_err(self.sql())?;
        Ok(())
    }
}
