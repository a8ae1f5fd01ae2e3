//! The in-process ledger (`memory:`; the Python package's
//! `Gate(ledger="memory:")`): the same state a SQLite or Redis ledger keeps
//! for a decision, held in this process's memory for as long as the
//! process lives. For tests and single-process agents: nothing outside
//! the process can see it, and it is gone when the process ends (so the
//! CLI's front-ends, whose processes are short or restartable, refuse it).
//!
//! A decision is one transaction, as on the other stores: it holds the
//! store's lock from its first read to its last write, and a decision that
//! ends in an error is rolled back — every write it made is undone, in
//! reverse, from the undo list each write appends to. A panic inside a
//! decision poisons the lock and every later decision refuses (fail
//! closed): the half-made decision is never read as if it were whole.
//!
//! Kept per session: the ledgers (the core's [`Ledger`], not its record:
//! nothing needs the bytes), the call ids with their answers, repetition
//! counts, reservations, rate-window instants, transcript offsets, counted
//! responses, unpriced models and loop windows. Not kept: the log (no
//! reader outside the process; `budgetgate ledger show` cannot reach it).
//! Memory grows with what a session must remember to decide exactly: each
//! call id and its answer (a reused id is refused), each distinct call's
//! repetition count.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use budgetgate_core::budget::Ledger;

use super::{CountedUsage, LedgerTx, StoreError, TranscriptCursor};

/// One session's state.
#[derive(Default)]
struct Session {
    ledgers: HashMap<String, Ledger>,
    calls: HashMap<String, (u128, String)>,
    repeats: HashMap<u128, u64>,
    unpriced: HashMap<String, ()>,
    reservations: HashMap<String, (String, u64)>,
    rate_calls: Vec<u64>,
    offsets: HashMap<String, TranscriptCursor>,
    responses: HashMap<String, CountedUsage>,
    transcript_calls: HashMap<String, String>,
    loops: HashMap<String, Vec<u8>>,
}

/// Every session's state.
#[derive(Default)]
struct State {
    sessions: HashMap<String, Session>,
}

impl State {
    fn session(&mut self, session: &str) -> &mut Session {
        if !self.sessions.contains_key(session) {
            self.sessions.insert(session.to_owned(), Session::default());
        }
        // Present: inserted just above when it was not.
        self.sessions
            .get_mut(session)
            .unwrap_or_else(|| unreachable!("the session was inserted"))
    }

    fn peek(&self, session: &str) -> Option<&Session> {
        self.sessions.get(session)
    }
}

/// The in-process ledger. Clones share it (the Python package's model and
/// tool gates decide over one ledger).
#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

/// Undoes one write of a transaction.
type Undo = Box<dyn FnOnce(&mut State)>;

/// What one decision reads and writes in the in-process ledger.
pub struct MemoryTx<'a> {
    state: RefCell<&'a mut State>,
    undo: RefCell<Vec<Undo>>,
}

impl MemoryStore {
    /// A new, empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `decide` as one transaction: its writes are kept when it
    /// returns `Ok`, all undone when it returns `Err`. A lock poisoned by
    /// a decision that panicked refuses (fail closed).
    pub fn decide<T, E: From<StoreError>>(
        &self,
        decide: impl FnOnce(&MemoryTx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut guard = self.state.lock().map_err(|_| {
            StoreError::InProcess(
                "an earlier decision failed part way (a panic); nothing more is decided".into(),
            )
        })?;
        let tx = MemoryTx {
            state: RefCell::new(&mut guard),
            undo: RefCell::new(Vec::new()),
        };
        let out = decide(&tx);
        if out.is_err() {
            let MemoryTx { state, undo } = tx;
            let state = state.into_inner();
            for undo in undo.into_inner().into_iter().rev() {
                undo(state);
            }
        }
        out
    }
}

impl MemoryTx<'_> {
    /// Reads `key` of one of `session`'s maps.
    fn get<K: Eq + Hash, V: Clone>(
        &self,
        session: &str,
        field: fn(&Session) -> &HashMap<K, V>,
        key: &K,
    ) -> Option<V> {
        let state = self.state.borrow();
        state.peek(session).and_then(|s| field(s).get(key).cloned())
    }

    /// Sets (`Some`) or removes (`None`) `key` of one of `session`'s maps,
    /// remembering how to undo it; returns what was there.
    fn put<K, V>(
        &self,
        session: &str,
        field: fn(&mut Session) -> &mut HashMap<K, V>,
        key: K,
        value: Option<V>,
    ) -> Option<V>
    where
        K: Eq + Hash + Clone + 'static,
        V: Clone + 'static,
    {
        let old = {
            let mut state = self.state.borrow_mut();
            let map = field(state.session(session));
            match value {
                Some(v) => map.insert(key.clone(), v),
                None => map.remove(&key),
            }
        };
        let was = old.clone();
        let session = session.to_owned();
        self.undo
            .borrow_mut()
            .push(Box::new(move |state: &mut State| {
                let map = field(state.session(&session));
                match was {
                    Some(v) => map.insert(key, v),
                    None => map.remove(&key),
                };
            }));
        old
    }
}

impl LedgerTx for MemoryTx<'_> {
    fn ledger(&self, session: &str, agent: &str) -> Result<Option<Ledger>, StoreError> {
        Ok(self.get(session, |s| &s.ledgers, &agent.to_owned()))
    }

    fn put_ledger(
        &self,
        session: &str,
        agent: &str,
        ledger: &Ledger,
        _now_ms: u64,
    ) -> Result<(), StoreError> {
        self.put(
            session,
            |s| &mut s.ledgers,
            agent.to_owned(),
            Some(ledger.clone()),
        );
        Ok(())
    }

    fn call(&self, session: &str, call_id: &str) -> Result<Option<(u128, String)>, StoreError> {
        Ok(self.get(session, |s| &s.calls, &call_id.to_owned()))
    }

    fn put_call(
        &self,
        session: &str,
        call_id: &str,
        fingerprint: u128,
        answer: &str,
    ) -> Result<(), StoreError> {
        // As the other stores: a call id is remembered once, never replaced.
        if self.call(session, call_id)?.is_some() {
            return Err(StoreError::InProcess(format!(
                "session {session:?}: call id {call_id:?} is remembered already"
            )));
        }
        self.put(
            session,
            |s| &mut s.calls,
            call_id.to_owned(),
            Some((fingerprint, answer.to_owned())),
        );
        Ok(())
    }

    fn has_traces(&self, session: &str) -> Result<bool, StoreError> {
        let state = self.state.borrow();
        Ok(state.peek(session).is_some_and(|s| {
            !(s.offsets.is_empty() && s.responses.is_empty() && s.calls.is_empty())
        }))
    }

    fn raise_repeat(&self, session: &str, fingerprint: u128) -> Result<u64, StoreError> {
        let count = self
            .get(session, |s| &s.repeats, &fingerprint)
            .unwrap_or(0)
            .saturating_add(1);
        self.put(session, |s| &mut s.repeats, fingerprint, Some(count));
        Ok(count)
    }

    fn unpriced(&self, session: &str) -> Result<Option<String>, StoreError> {
        let state = self.state.borrow();
        Ok(state
            .peek(session)
            .and_then(|s| s.unpriced.keys().min().cloned()))
    }

    fn log(
        &self,
        _at_ms: u64,
        _session: &str,
        _action: &str,
        _detail: &str,
    ) -> Result<(), StoreError> {
        // Not kept: nothing outside the process could read it.
        Ok(())
    }

    fn put_reservation(
        &self,
        session: &str,
        key: &str,
        tool: &str,
        expires_ms: u64,
    ) -> Result<(), StoreError> {
        self.put(
            session,
            |s| &mut s.reservations,
            key.to_owned(),
            Some((tool.to_owned(), expires_ms)),
        );
        Ok(())
    }

    fn take_reservation(&self, session: &str, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .put(session, |s| &mut s.reservations, key.to_owned(), None)
            .map(|(tool, _)| tool))
    }

    fn take_expired_reservations(
        &self,
        session: &str,
        now_ms: u64,
    ) -> Result<Vec<String>, StoreError> {
        let expired: Vec<String> = {
            let state = self.state.borrow();
            state.peek(session).map_or_else(Vec::new, |s| {
                s.reservations
                    .iter()
                    .filter(|(_, (_, expires))| *expires <= now_ms)
                    .map(|(key, _)| key.clone())
                    .collect()
            })
        };
        expired
            .into_iter()
            .filter_map(|key| self.take_reservation(session, &key).transpose())
            .collect()
    }

    fn add_rate_call(&self, session: &str, at_ms: u64, keep_ms: u64) -> Result<(), StoreError> {
        let was = {
            let mut state = self.state.borrow_mut();
            let calls = &mut state.session(session).rate_calls;
            let was = calls.clone();
            let oldest_kept = at_ms.saturating_sub(keep_ms);
            calls.retain(|&at| at >= oldest_kept);
            calls.push(at_ms);
            was
        };
        let session = session.to_owned();
        self.undo
            .borrow_mut()
            .push(Box::new(move |state: &mut State| {
                state.session(&session).rate_calls = was;
            }));
        Ok(())
    }

    fn rate_calls_after(
        &self,
        session: &str,
        since_ms: u64,
    ) -> Result<(u64, Option<u64>), StoreError> {
        let state = self.state.borrow();
        let after = state
            .peek(session)
            .map(|s| s.rate_calls.iter().filter(|&&at| at > since_ms));
        Ok(after.map_or((0, None), |after| {
            after.fold((0, None), |(n, oldest): (u64, Option<u64>), &at| {
                (n + 1, Some(oldest.map_or(at, |o| o.min(at))))
            })
        }))
    }

    fn transcript_cursor(&self, session: &str, path: &str) -> Result<TranscriptCursor, StoreError> {
        Ok(self
            .get(session, |s| &s.offsets, &path.to_owned())
            .unwrap_or_default())
    }

    fn set_transcript_cursor(
        &self,
        session: &str,
        path: &str,
        cursor: &TranscriptCursor,
    ) -> Result<(), StoreError> {
        self.put(
            session,
            |s| &mut s.offsets,
            path.to_owned(),
            Some(cursor.clone()),
        );
        Ok(())
    }

    fn transcript_call(&self, session: &str, call_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.get(session, |s| &s.transcript_calls, &call_id.to_owned()))
    }

    fn put_transcript_call(
        &self,
        session: &str,
        call_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        self.put(
            session,
            |s| &mut s.transcript_calls,
            call_id.to_owned(),
            Some(message_id.to_owned()),
        );
        Ok(())
    }

    fn response(&self, session: &str, key: &str) -> Result<Option<CountedUsage>, StoreError> {
        Ok(self.get(session, |s| &s.responses, &key.to_owned()))
    }

    fn put_response(
        &self,
        session: &str,
        key: &str,
        _agent: &str,
        _model: &str,
        usage: CountedUsage,
    ) -> Result<(), StoreError> {
        self.put(session, |s| &mut s.responses, key.to_owned(), Some(usage));
        Ok(())
    }

    fn add_unpriced(&self, session: &str, model: &str) -> Result<(), StoreError> {
        self.put(session, |s| &mut s.unpriced, model.to_owned(), Some(()));
        Ok(())
    }

    fn loop_window(&self, session: &str, agent: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.get(session, |s| &s.loops, &agent.to_owned()))
    }

    fn put_loop_window(&self, session: &str, agent: &str, record: &[u8]) -> Result<(), StoreError> {
        self.put(
            session,
            |s| &mut s.loops,
            agent.to_owned(),
            Some(record.to_vec()),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Failed;
    impl From<StoreError> for Failed {
        fn from(_: StoreError) -> Self {
            Failed
        }
    }

    fn write_everything(tx: &MemoryTx<'_>, n: u64) {
        let ledger = Ledger::new(n);
        tx.put_ledger("s", "", &ledger, n).unwrap();
        tx.put_call("s", &format!("c{n}"), u128::from(n), "ok")
            .unwrap();
        tx.raise_repeat("s", 7).unwrap();
        tx.add_unpriced("s", "m").unwrap();
        tx.put_reservation("s", "r", "t", 100 + n).unwrap();
        tx.add_rate_call("s", 1_000 + n, 10).unwrap();
        let cursor = TranscriptCursor {
            offset: n,
            open: Some(format!("r{n}")),
        };
        tx.set_transcript_cursor("s", "p", &cursor).unwrap();
        tx.put_response("s", "k", "", "m", CountedUsage::default())
            .unwrap();
        tx.put_loop_window("s", "", &[n as u8]).unwrap();
    }

    /// Everything a decision can read, as one comparable text; read in a
    /// decision that then fails, so that taking the expired reservations
    /// is undone and the snapshot changes nothing.
    fn snapshot(store: &MemoryStore) -> String {
        let read = |tx: &MemoryTx<'_>| -> Result<String, StoreError> {
            Ok(format!(
                "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                tx.ledger("s", "")?
                    .map(|l| l.to_record().as_bytes().to_vec()),
                tx.call("s", "c1")?,
                tx.call("s", "c2")?,
                tx.has_traces("s")?,
                tx.unpriced("s")?,
                tx.rate_calls_after("s", 0)?,
                tx.transcript_cursor("s", "p")?,
                tx.response("s", "k")?,
                tx.loop_window("s", "")?,
                tx.take_expired_reservations("s", u64::MAX)?,
            ))
        };
        #[derive(Debug)]
        struct Read(Result<String, StoreError>);
        impl From<StoreError> for Read {
            fn from(e: StoreError) -> Self {
                Read(Err(e))
            }
        }
        match store.decide(|tx| -> Result<(), Read> { Err(Read(read(tx))) }) {
            Err(Read(Ok(text))) => text,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_decision_that_fails_leaves_the_state_as_it_was() {
        let store = MemoryStore::new();
        store
            .decide(|tx| -> Result<(), Failed> {
                write_everything(tx, 1);
                Ok(())
            })
            .unwrap();
        let before = snapshot(&store);
        let out = store.decide(|tx| -> Result<(), Failed> {
            write_everything(tx, 2);
            assert_eq!(tx.raise_repeat("s", 7).unwrap(), 3);
            assert!(tx.take_reservation("s", "r").unwrap().is_some());
            Err(Failed)
        });
        assert!(out.is_err());
        assert_eq!(snapshot(&store), before);
        // The repetition count is the first decision's, not the failed one's.
        let count = store
            .decide(|tx| -> Result<u64, Failed> { Ok(tx.raise_repeat("s", 7)?) })
            .unwrap();
        assert_eq!(count, 2);
    }

    #[test]
    fn a_decision_that_succeeds_is_kept_and_clones_share_it() {
        let store = MemoryStore::new();
        let other = store.clone();
        store
            .decide(|tx| -> Result<(), Failed> {
                write_everything(tx, 1);
                Ok(())
            })
            .unwrap();
        let seen = other
            .decide(|tx| -> Result<_, Failed> {
                Ok((
                    tx.call("s", "c1")?,
                    tx.transcript_cursor("s", "p")?,
                    tx.has_traces("t")?,
                ))
            })
            .unwrap();
        assert_eq!(
            seen,
            (
                Some((1, "ok".to_owned())),
                TranscriptCursor {
                    offset: 1,
                    open: Some("r1".into())
                },
                false
            )
        );
    }

    #[test]
    fn a_call_id_is_remembered_once() {
        let store = MemoryStore::new();
        let out = store.decide(|tx| -> Result<(), StoreError> {
            tx.put_call("s", "c", 1, "a")?;
            tx.put_call("s", "c", 2, "b")
        });
        assert!(matches!(out, Err(StoreError::InProcess(_))), "{out:?}");
        // Rolled back whole: the first write too.
        let kept = store
            .decide(|tx| -> Result<_, StoreError> { tx.call("s", "c") })
            .unwrap();
        assert_eq!(kept, None);
    }

    #[test]
    fn rate_calls_keep_the_window_and_count_after_an_instant() {
        let store = MemoryStore::new();
        let counts = store
            .decide(|tx| -> Result<_, StoreError> {
                tx.add_rate_call("s", 100, 50)?;
                tx.add_rate_call("s", 120, 50)?;
                // 100 is older than 160 - 50 = 110: forgotten.
                tx.add_rate_call("s", 160, 50)?;
                Ok((
                    tx.rate_calls_after("s", 0)?,
                    tx.rate_calls_after("s", 120)?,
                    tx.rate_calls_after("s", 160)?,
                ))
            })
            .unwrap();
        assert_eq!(counts, ((2, Some(120)), (1, Some(160)), (0, None)));
    }

    #[test]
    fn expired_reservations_are_taken_once_and_live_ones_kept() {
        let store = MemoryStore::new();
        let taken = store
            .decide(|tx| -> Result<_, StoreError> {
                tx.put_reservation("s", "a", "x", 10)?;
                tx.put_reservation("s", "b", "y", 20)?;
                let first = tx.take_expired_reservations("s", 10)?;
                let again = tx.take_expired_reservations("s", 10)?;
                let live = tx.take_reservation("s", "b")?;
                Ok((first, again, live))
            })
            .unwrap();
        assert_eq!(taken, (vec!["x".to_owned()], vec![], Some("y".to_owned())));
    }

    #[test]
    fn a_panic_inside_a_decision_refuses_every_later_one() {
        let store = MemoryStore::new();
        let shared = store.clone();
        let _ = std::thread::spawn(move || {
            shared.decide(|tx| -> Result<(), StoreError> {
                tx.put_call("s", "c", 1, "a")?;
                panic!("a bug in the middle of a decision");
            })
        })
        .join();
        let out = store.decide(|tx| -> Result<_, StoreError> { tx.call("s", "c") });
        assert!(matches!(out, Err(StoreError::InProcess(_))), "{out:?}");
    }
}
