//! Bounds on the text files flitnet parses (topologies, scenarios, routing
//! tables): a file larger than [`MAX_FILE_BYTES`] is refused before it is
//! read, and YAML nested deeper than [`MAX_YAML_NESTING`] before it is
//! parsed (the YAML parser takes minutes on a 200 KB file of nested flow
//! collections: `[[[[…]]]]`).

use std::io::Read;
use std::path::Path;

/// Largest input file: the explicit form of a 10,000-node fabric is a few
/// MB.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Deepest YAML nesting of flow collections (`[`, `{`) and block
/// indentation levels; flitnet's formats need fewer than 8.
pub const MAX_YAML_NESTING: usize = 64;

/// Why an input was refused.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    #[error("larger than {} MiB: refused", MAX_FILE_BYTES >> 20)]
    TooLarge,
    #[error("line {line}: nested deeper than {MAX_YAML_NESTING} levels: refused")]
    TooDeep { line: usize },
}

/// Reads `path` as UTF-8 text, at most [`MAX_FILE_BYTES`].
pub fn read_bounded(path: &Path) -> Result<String, InputError> {
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(InputError::TooLarge);
    }
    Ok(text)
}

/// Checks `text` (YAML) against [`MAX_FILE_BYTES`] and
/// [`MAX_YAML_NESTING`], counting flow brackets outside quotes and
/// comments, and block levels by the distinct indentations open above a
/// line. Linear in the text.
pub fn check_yaml(text: &str) -> Result<(), InputError> {
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(InputError::TooLarge);
    }
    let mut flow = 0usize;
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    // Indentations of the open block levels, innermost last.
    let mut indents: Vec<usize> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let deep = || InputError::TooDeep { line: n + 1 };
        if quote.is_none() && flow == 0 {
            let body = line.trim_start_matches([' ', '-']);
            if !body.is_empty() && !body.starts_with('#') {
                // `- - - x` opens one level per dash, like indentation.
                let indent = line.len() - body.len();
                while indents.last().is_some_and(|&i| i >= indent) {
                    indents.pop();
                }
                indents.push(indent);
                let dashes = line[..indent].bytes().filter(|&b| b == b'-').count();
                if indents.len() + dashes > MAX_YAML_NESTING {
                    return Err(deep());
                }
            }
        }
        let mut prev = b' ';
        for &b in line.as_bytes() {
            match quote {
                Some(q) => {
                    if escaped {
                        escaped = false;
                    } else if q == b'"' && b == b'\\' {
                        escaped = true;
                    } else if b == q {
                        quote = None;
                    }
                }
                None => match b {
                    b'#' if prev == b' ' || prev == b'\t' => break,
                    b'"' | b'\'' if matches!(prev, b' ' | b'[' | b'{' | b',' | b':') => {
                        quote = Some(b)
                    }
                    b'[' | b'{' => {
                        flow += 1;
                        if flow + indents.len() > MAX_YAML_NESTING {
                            return Err(deep());
                        }
                    }
                    b']' | b'}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            prev = b;
        }
        // A single-quoted scalar may span lines; a double-quoted one too.
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_yaml_passes() {
        for text in [
            "generator: kary-ntree\nk: 4\nn: 2\n",
            "switches:\n  - {name: s0, radix: 4}\n  - {name: s1, radix: 4}\nlinks:\n  - \"s0:0 -- s1:0\"\n",
            "a: '[[[[ not brackets'\nb: \"{{{{ \\\" {{\"\nc: x # [[[[ comment\n",
        ] {
            check_yaml(text).unwrap();
        }
    }

    #[test]
    fn deep_flow_and_block_nesting_are_refused_with_the_line() {
        let flow = format!("a: 1\nswitches: {}{}\n", "[".repeat(100), "]".repeat(100));
        let err = check_yaml(&flow).unwrap_err().to_string();
        assert!(
            err.contains("line 2") && err.contains("nested deeper than 64"),
            "{err}"
        );
        let mut block = String::from("switches:\n");
        for i in 0..100 {
            block += &format!("{}k{i}:\n", " ".repeat(i + 1));
        }
        assert!(matches!(
            check_yaml(&block),
            Err(InputError::TooDeep { .. })
        ));
        let dashes = format!("x:\n{}1\n", "- ".repeat(100));
        assert!(matches!(
            check_yaml(&dashes),
            Err(InputError::TooDeep { .. })
        ));
    }

    #[test]
    fn a_file_over_the_size_limit_is_not_read_whole() {
        let path = std::env::temp_dir().join(format!("input-big-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(MAX_FILE_BYTES + 10).unwrap();
        assert!(matches!(read_bounded(&path), Err(InputError::TooLarge)));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_200_kb_nested_topology_file_is_refused_by_name_before_parsing() {
        let text = format!("switches: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let started = std::time::Instant::now();
        let err = crate::topology::Topology::from_yaml_str(&text, "deep.yaml")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "deep.yaml:1: nested deeper than 64 levels: refused");
        // Linear: well under a second even in a debug build (the parser
        // took a minute on this file).
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn aliases_cannot_blow_up() {
        // Each level refers to the one before ten times ("billion laughs").
        let mut text = String::from("a0: &a0 [x]\n");
        for i in 1..12 {
            text += &format!(
                "a{i}: &a{i} [{}]\n",
                vec![format!("*a{}", i - 1); 10].join(",")
            );
        }
        text += "switches: *a11\n";
        let err = crate::topology::Topology::from_yaml_str(&text, "laughs.yaml").unwrap_err();
        assert!(err.to_string().starts_with("laughs.yaml"), "{err}");
    }
}
