//! Short texts for people, shared by the subcommands: a message kept on one
//! line, a text cut to a width.

/// Keeps a message on one line: every run of white space (line breaks
/// included) becomes one space, none at either end.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` cut to at most `max` characters, ending in `…` when cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_counts_characters_and_marks_the_cut() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcd", 3), "ab…");
        assert_eq!(shorten(&"é".repeat(50), 40).chars().count(), 40);
    }
}
