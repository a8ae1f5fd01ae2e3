//! The host's approvers (`SPEC C`): a policy answer (used by `replay`) and a
//! terminal prompt, as the reference's `input("¿Apruebas? [s/N] ")`.

use std::io::{BufRead, Write};

use budgetgate_core::turn::{ApprovalAnswer, Approver, ProposedCall};

use super::budget::ApprovePolicy;

/// Answers from a policy (a budget file's `approve`, or `--approve`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyApprover(pub ApprovePolicy);

impl Approver for PolicyApprover {
    fn answer(&mut self, call: &ProposedCall<'_>) -> ApprovalAnswer {
        if self.0.grants(call.name) {
            ApprovalAnswer::Approve
        } else {
            ApprovalAnswer::Refuse
        }
    }
}

/// Asks a person on a terminal: shows the tool and its arguments, reads one
/// line; `y` or `yes` (any case) approves, anything else — an empty line, end
/// of input, a read error — refuses, as the reference's `[s/N]` prompt does.
#[derive(Debug)]
pub struct PromptApprover<R, W> {
    input: R,
    output: W,
}

impl<R: BufRead, W: Write> PromptApprover<R, W> {
    /// A prompt reading answers from `input` and writing questions to `output`
    /// (for a terminal: locked stdin and stderr).
    pub fn new(input: R, output: W) -> Self {
        Self { input, output }
    }
}

impl<R: BufRead, W: Write> Approver for PromptApprover<R, W> {
    fn answer(&mut self, call: &ProposedCall<'_>) -> ApprovalAnswer {
        // The name and arguments come from the model: escaped, so that they
        // cannot move the cursor, reorder the line or hide a character.
        let arguments = String::from_utf8_lossy(call.input);
        let asked = writeln!(
            self.output,
            "The agent wants to run {} with {}",
            crate::term::terminal_safe(call.name),
            crate::term::terminal_safe(&arguments)
        )
        .and_then(|()| write!(self.output, "Approve? [y/N] "))
        .and_then(|()| self.output.flush());
        if asked.is_err() {
            return ApprovalAnswer::Refuse;
        }
        let mut line = String::new();
        match self.input.read_line(&mut line) {
            Ok(_) if matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes") => {
                ApprovalAnswer::Approve
            }
            _ => ApprovalAnswer::Refuse,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str) -> ProposedCall<'_> {
        ProposedCall {
            call_id: "c1",
            name,
            arguments: None,
            input: br#"{"order":7}"#,
        }
    }

    #[test]
    fn prompt_approves_only_on_yes() {
        let mut out = Vec::new();
        let mut prompt = PromptApprover::new(&b"y\nno\n\nYES\n"[..], &mut out);
        assert_eq!(prompt.answer(&call("refund")), ApprovalAnswer::Approve);
        assert_eq!(prompt.answer(&call("refund")), ApprovalAnswer::Refuse);
        assert_eq!(prompt.answer(&call("refund")), ApprovalAnswer::Refuse);
        assert_eq!(prompt.answer(&call("refund")), ApprovalAnswer::Approve);
        // End of input refuses.
        assert_eq!(prompt.answer(&call("refund")), ApprovalAnswer::Refuse);
        let shown = String::from_utf8(out).unwrap();
        assert!(
            shown.starts_with("The agent wants to run refund with {\"order\":7}\nApprove? [y/N] ")
        );
    }

    #[test]
    fn the_prompt_shows_names_and_arguments_escaped() {
        let mut out = Vec::new();
        let mut prompt = PromptApprover::new(&b"n\n"[..], &mut out);
        let call = ProposedCall {
            input: b"{\"c\":\"\x1b[2J\"}",
            ..call("Bash\u{200b}")
        };
        assert_eq!(prompt.answer(&call), ApprovalAnswer::Refuse);
        let shown = String::from_utf8(out).unwrap();
        assert!(
            shown.contains("run Bash\\u{200b} with {\"c\":\"\\u{1b}[2J\"}"),
            "{shown}"
        );
    }

    #[test]
    fn policy_answers() {
        let mut some = PolicyApprover(ApprovePolicy::parse("refund, delete").unwrap());
        assert_eq!(some.answer(&call("delete")), ApprovalAnswer::Approve);
        assert_eq!(some.answer(&call("send")), ApprovalAnswer::Refuse);
        assert_eq!(
            PolicyApprover(ApprovePolicy::All).answer(&call("x")),
            ApprovalAnswer::Approve
        );
        assert_eq!(
            PolicyApprover(ApprovePolicy::None).answer(&call("x")),
            ApprovalAnswer::Refuse
        );
    }
}
