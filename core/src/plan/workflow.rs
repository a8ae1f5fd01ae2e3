//! What a plan costs (`SPEC B1`: its usage) and how far it goes within
//! the limits (`SPEC B2`: the bounded workflow and its report).

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use super::{LimitKey, Limits, Plan, PlanRow};

/// Totals and maxima over plan rows (`SPEC B1`); for a workflow, over the
/// accepted prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Usage {
    /// Rows counted.
    pub steps: u32,
    /// Sum of `tokens`.
    pub tokens: u32,
    /// Sum of `output`.
    pub output: u32,
    /// Largest depth (1 for roots); 0 for no rows.
    pub max_depth: u32,
    /// Most children of one parent (roots share one virtual parent); 0 for no rows.
    pub max_fanout: u32,
}

/// Children counted per parent row, plus the roots' shared virtual parent.
struct FanOut<const N: usize> {
    children: [u8; N],
    roots: u8,
}

impl<const N: usize> FanOut<N> {
    const fn new() -> Self {
        Self {
            children: [0; N],
            roots: 0,
        }
    }
    fn slot(&mut self, parent: Option<usize>) -> Option<&mut u8> {
        match parent {
            None => Some(&mut self.roots),
            Some(i) => self.children.get_mut(i),
        }
    }
    /// The parent's count if one more child were accepted.
    fn next(&mut self, parent: Option<usize>) -> u32 {
        self.slot(parent).map_or(0, |c| u32::from(*c)) + 1
    }
    fn add(&mut self, parent: Option<usize>) {
        if let Some(c) = self.slot(parent) {
            *c = c.saturating_add(1);
        }
    }
}

impl<const N: usize> Plan<N> {
    /// Sums and maxima over all rows (`SPEC B1`). An empty plan gives zeros.
    pub fn usage(&self) -> Usage {
        let mut usage = Usage::default();
        let mut fan = FanOut::<N>::new();
        for row in &self.rows {
            let fanout = fan.next(row.parent());
            fan.add(row.parent());
            usage = usage.with(row, fanout);
        }
        usage
    }
}

impl Usage {
    fn with(self, row: &PlanRow, fanout: u32) -> Self {
        Self {
            steps: self.steps + 1,
            tokens: self.tokens + row.tokens,
            output: self.output + row.output,
            max_depth: self.max_depth.max(row.depth()),
            max_fanout: self.max_fanout.max(fanout),
        }
    }
}

/// Why a workflow ended (`SPEC B2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StopReason {
    /// Every step was accepted: `complete`.
    Complete,
    /// This limit would have been exceeded by the next step.
    Limit(LimitKey),
}

impl StopReason {
    /// `complete` or the limit's key.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Limit(k) => k.key(),
        }
    }
}

/// The outcome of a bounded workflow (`SPEC B2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Workflow {
    /// How many leading rows were accepted (accepted steps are always a prefix).
    pub accepted: usize,
    /// Index of the row that stopped the run, `None` when complete.
    pub stopped: Option<usize>,
    /// `complete`, or the limit that stopped it.
    pub reason: StopReason,
    /// Usage of the accepted prefix only.
    pub usage: Usage,
}

impl<const N: usize> Plan<N> {
    /// Runs the bounded workflow (`SPEC B2`): before each step the would-be
    /// totals are checked in the order steps, tokens, output, depth, fanout;
    /// the first one over its limit stops the run before that step. Equality
    /// is allowed.
    pub fn bounded_workflow(&self, limits: &Limits) -> Workflow {
        let mut usage = Usage::default();
        let mut fan = FanOut::<N>::new();
        for (index, row) in self.rows.iter().enumerate() {
            let fanout = fan.next(row.parent());
            let next = [
                usage.steps + 1,
                usage.tokens + row.tokens,
                usage.output + row.output,
                row.depth(),
                fanout,
            ];
            if let Some(key) = LimitKey::ALL
                .into_iter()
                .zip(next)
                .find(|(key, value)| *value > limits.get(*key))
                .map(|(key, _)| key)
            {
                return Workflow {
                    accepted: index,
                    stopped: Some(index),
                    reason: StopReason::Limit(key),
                    usage,
                };
            }
            fan.add(row.parent());
            usage = usage.with(row, fanout);
        }
        Workflow {
            accepted: self.rows.len(),
            stopped: None,
            reason: StopReason::Complete,
            usage,
        }
    }

    /// The workflow outcome with ids, serializable as the reference's result
    /// `{accepted: [ids], stopped: id | null, reason, usage}`.
    pub fn report<'p>(&'p self, workflow: &Workflow) -> WorkflowReport<'p, N> {
        WorkflowReport {
            plan: self,
            workflow: *workflow,
        }
    }
}

/// A [`Workflow`] together with its plan, for serialization.
pub struct WorkflowReport<'p, const N: usize> {
    plan: &'p Plan<N>,
    workflow: Workflow,
}

struct AcceptedIds<'p>(&'p [PlanRow]);

impl Serialize for AcceptedIds<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for row in self.0 {
            seq.serialize_element(row.id.as_str())?;
        }
        seq.end()
    }
}

impl<const N: usize> Serialize for WorkflowReport<'_, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let rows = self.plan.rows();
        let mut map = s.serialize_map(Some(4))?;
        map.serialize_entry(
            "accepted",
            &AcceptedIds(rows.get(..self.workflow.accepted).unwrap_or(&[])),
        )?;
        map.serialize_entry(
            "stopped",
            &self
                .workflow
                .stopped
                .and_then(|i| rows.get(i))
                .map(|r| r.id.as_str()),
        )?;
        map.serialize_entry("reason", self.workflow.reason.as_str())?;
        map.serialize_entry("usage", &self.workflow.usage)?;
        map.end()
    }
}
