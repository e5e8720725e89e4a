//! A Dockerfile read as Docker reads it: instructions (continuation lines joined, comments and
//! parser directives left out) grouped into stages. Shared by tests/image.rs (the Dockerfile's
//! contract) and tests/chart_pod (the image's root filesystem assembled from it).

/// One Dockerfile instruction: keyword (upper case) and its arguments, continuation lines
/// joined, comments and parser directives left out.
pub fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (keyword, args) = current.split_once(' ').unwrap_or((&current, ""));
        out.push((keyword.to_uppercase(), args.trim().to_owned()));
        current.clear();
    }
    out
}

pub struct Stage {
    pub from: String,
    pub name: Option<String>,
    pub instructions: Vec<(String, String)>,
}

pub fn stages(text: &str) -> Vec<Stage> {
    let mut out: Vec<Stage> = Vec::new();
    for (keyword, args) in instructions(text) {
        if keyword == "FROM" {
            let words: Vec<&str> = args.split_whitespace().collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some((*name).to_owned()),
                _ => None,
            };
            out.push(Stage {
                from: words[0].to_owned(),
                name,
                instructions: Vec::new(),
            });
        } else if let Some(stage) = out.last_mut() {
            stage.instructions.push((keyword, args));
        }
    }
    out
}
