//! Permission queries: the string form of Unkey's v2 `keys.verifyKey` (API-v2.md §2.4),
//! parsed here into the same [`PermissionQuery`] that v1's `{"and": [...]}` / `{"or":
//! [...]}` objects become, so both forms are evaluated by one evaluator
//! ([`PermissionQuery::satisfied_by`]).
//!
//! ```text
//! expr = term ("OR" term)*        AND binds tighter than OR
//! term = atom ("AND" atom)*       AND, OR: whole words, any case
//! atom = PERMISSION | "(" expr ")"
//! ```
//!
//! A PERMISSION is one or more of `A-Z a-z 0-9 . _ - : * /` (`*` is literal, not a
//! pattern); space, tab, CR and LF separate tokens. A syntax error names what was wrong
//! and where: a character position, counted from 0 ([`QuerySyntaxError`]).
//!
//! Bounds, so that a hostile query costs little: at most [`MAX_QUERY_NODES`] permissions
//! and operators, at most [`MAX_QUERY_TOKENS`] words and parentheses, and at most
//! [`MAX_QUERY_DEPTH`] levels of parentheses (the parser recurses once per level).

/// Most permissions and operators in one query (either form).
pub const MAX_QUERY_NODES: usize = 1_000;

/// A permission query of `keys.verifyKey`: a permission name, or all / any of sub-queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionQuery {
    Permission(String),
    And(Vec<PermissionQuery>),
    Or(Vec<PermissionQuery>),
}

impl PermissionQuery {
    /// Whether a key holding exactly `held` satisfies the query. Names are compared
    /// literally, like root-key permissions (`*` in a key's permission is not a pattern).
    pub fn satisfied_by(&self, held: &impl Fn(&str) -> bool) -> bool {
        match self {
            PermissionQuery::Permission(p) => held(p.as_str()),
            PermissionQuery::And(all) => all.iter().all(|q| q.satisfied_by(held)),
            PermissionQuery::Or(any) => any.iter().any(|q| q.satisfied_by(held)),
        }
    }
}

/// Most levels of parentheses in a string query.
pub const MAX_QUERY_DEPTH: usize = 64;

/// Most words and parentheses in a string query (read before it is parsed): room for
/// [`MAX_QUERY_NODES`] with parentheses around each.
pub const MAX_QUERY_TOKENS: usize = 4 * MAX_QUERY_NODES;

/// A string query that does not follow the grammar: what, and at which character
/// (counted from 0; the end of the query is its length).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at position {position}")]
pub struct QuerySyntaxError {
    pub position: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Open,
    Close,
    And,
    Or,
    Permission(String),
    End,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Open => "'('".into(),
            Token::Close => "')'".into(),
            Token::And => "AND".into(),
            Token::Or => "OR".into(),
            Token::Permission(p) => format!("permission {p:?}"),
            Token::End => "the end of the query".into(),
        }
    }
}

fn is_permission_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '*' | '/')
}

/// The tokens of `text`, each with its character position; the last is [`Token::End`].
fn tokens(text: &str) -> Result<Vec<(usize, Token)>, QuerySyntaxError> {
    let mut out = Vec::new();
    let mut chars = text.chars().enumerate().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            ' ' | '\t' | '\r' | '\n' => {}
            '(' => out.push((at, Token::Open)),
            ')' => out.push((at, Token::Close)),
            c if is_permission_char(c) => {
                let mut word = String::from(c);
                while let Some((_, c)) = chars.next_if(|(_, c)| is_permission_char(*c)) {
                    word.push(c);
                }
                let token = match word.to_ascii_lowercase().as_str() {
                    "and" => Token::And,
                    "or" => Token::Or,
                    _ => Token::Permission(word),
                };
                out.push((at, token));
            }
            other => {
                return Err(QuerySyntaxError {
                    position: at,
                    message: format!(
                        "unexpected character {other:?} (permissions use A-Z a-z 0-9 . _ - : * /)"
                    ),
                });
            }
        }
        if out.len() > MAX_QUERY_TOKENS {
            return Err(QuerySyntaxError {
                position: at,
                message: format!("the query is too long: more than {MAX_QUERY_TOKENS} words and parentheses"),
            });
        }
    }
    out.push((text.chars().count(), Token::End));
    Ok(out)
}

struct Parser {
    tokens: Vec<(usize, Token)>,
    next: usize,
    nodes: usize,
}

impl Parser {
    fn peek(&self) -> &(usize, Token) {
        // `tokens` ends with End, which is never consumed.
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn error(&self, message: impl Into<String>) -> QuerySyntaxError {
        QuerySyntaxError { position: self.peek().0, message: message.into() }
    }

    fn count(&mut self) -> Result<(), QuerySyntaxError> {
        self.nodes += 1;
        match self.nodes > MAX_QUERY_NODES {
            true => {
                Err(self
                    .error(format!("the query holds more than {MAX_QUERY_NODES} permissions and operators")))
            }
            false => Ok(()),
        }
    }

    /// `expr = term ("OR" term)*`
    fn expr(&mut self, depth: usize) -> Result<PermissionQuery, QuerySyntaxError> {
        self.joined(depth, &Token::Or, PermissionQuery::Or, Self::term)
    }

    /// `term = atom ("AND" atom)*`
    fn term(&mut self, depth: usize) -> Result<PermissionQuery, QuerySyntaxError> {
        self.joined(depth, &Token::And, PermissionQuery::And, Self::atom)
    }

    /// `part (op part)*`: one part as it is, several joined by `join`.
    fn joined(
        &mut self,
        depth: usize,
        op: &Token,
        join: fn(Vec<PermissionQuery>) -> PermissionQuery,
        part: fn(&mut Self, usize) -> Result<PermissionQuery, QuerySyntaxError>,
    ) -> Result<PermissionQuery, QuerySyntaxError> {
        let mut parts = vec![part(self, depth)?];
        while self.peek().1 == *op {
            self.next += 1;
            self.count()?;
            parts.push(part(self, depth)?);
        }
        Ok(if parts.len() == 1 { parts.remove(0) } else { join(parts) })
    }

    /// `atom = PERMISSION | "(" expr ")"`
    fn atom(&mut self, depth: usize) -> Result<PermissionQuery, QuerySyntaxError> {
        match self.peek().1.clone() {
            Token::Permission(p) => {
                self.count()?;
                self.next += 1;
                Ok(PermissionQuery::Permission(p))
            }
            Token::Open if depth >= MAX_QUERY_DEPTH => {
                Err(self.error(format!("parentheses nest deeper than {MAX_QUERY_DEPTH} levels")))
            }
            Token::Open => {
                self.next += 1;
                let inner = self.expr(depth + 1)?;
                match self.peek().1 {
                    Token::Close => {
                        self.next += 1;
                        Ok(inner)
                    }
                    ref found => Err(self.error(format!("expected ')' but found {}", found.describe()))),
                }
            }
            found => Err(self.error(format!("expected a permission or '(' but found {}", found.describe()))),
        }
    }
}

/// Parses a string query. Empty input, a stray or missing operator or parenthesis, `()`,
/// or a character outside the grammar is a [`QuerySyntaxError`].
pub fn parse_permission_query(text: &str) -> Result<PermissionQuery, QuerySyntaxError> {
    let mut parser = Parser { tokens: tokens(text)?, next: 0, nodes: 0 };
    if parser.peek().1 == Token::End {
        return Err(parser.error("the query is empty"));
    }
    let query = parser.expr(0)?;
    match &parser.peek().1 {
        Token::End => Ok(query),
        found => {
            Err(parser
                .error(format!("expected AND, OR or the end of the query but found {}", found.describe())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PermissionQuery::{And, Or, Permission};
    use proptest::prelude::*;

    fn p(name: &str) -> PermissionQuery {
        Permission(name.to_string())
    }

    fn err(text: &str) -> (usize, String) {
        let e = parse_permission_query(text).expect_err(text);
        (e.position, e.message)
    }

    #[test]
    fn and_binds_tighter_than_or_and_parentheses_group() {
        let cases = [
            ("a", p("a")),
            ("a AND b", And(vec![p("a"), p("b")])),
            ("a OR b AND c", Or(vec![p("a"), And(vec![p("b"), p("c")])])),
            ("a AND b OR c", Or(vec![And(vec![p("a"), p("b")]), p("c")])),
            ("a AND (b OR c)", And(vec![p("a"), Or(vec![p("b"), p("c")])])),
            ("((a))", p("a")),
            ("a and b Or c", Or(vec![And(vec![p("a"), p("b")]), p("c")])),
            (" \t\r\na\nAND\tb ", And(vec![p("a"), p("b")])),
            ("documents.read AND api.*.verify_key OR x/y:z-1_2", {
                Or(vec![And(vec![p("documents.read"), p("api.*.verify_key")]), p("x/y:z-1_2")])
            }),
            ("(a)AND(b)", And(vec![p("a"), p("b")])),
            ("andy OR oregon", Or(vec![p("andy"), p("oregon")])),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_permission_query(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn syntax_errors_name_what_and_where() {
        assert_eq!(err(""), (0, "the query is empty".into()));
        assert_eq!(err("   "), (3, "the query is empty".into()));
        assert_eq!(err("a AND"), (5, "expected a permission or '(' but found the end of the query".into()));
        assert_eq!(err("AND a"), (0, "expected a permission or '(' but found AND".into()));
        assert_eq!(err("a OR OR b"), (5, "expected a permission or '(' but found OR".into()));
        assert_eq!(
            err("a b"),
            (2, "expected AND, OR or the end of the query but found permission \"b\"".into())
        );
        assert_eq!(err("(a OR b"), (7, "expected ')' but found the end of the query".into()));
        assert_eq!(err("a OR b)"), (6, "expected AND, OR or the end of the query but found ')'".into()));
        assert_eq!(err("()"), (1, "expected a permission or '(' but found ')'".into()));
        assert!(err("a AND é").1.starts_with("unexpected character 'é'"));
        assert_eq!(err("a AND é").0, 6);
        assert_eq!(err("a,b").0, 1);
        assert_eq!(err("ü AND a\"").0, 0);
        let e = parse_permission_query("a AND").unwrap_err();
        assert_eq!(
            e.to_string(),
            "expected a permission or '(' but found the end of the query at position 5"
        );
    }

    #[test]
    fn hostile_queries_are_refused_cheaply() {
        let deep = format!("{}a{}", "(".repeat(MAX_QUERY_DEPTH), ")".repeat(MAX_QUERY_DEPTH));
        assert_eq!(parse_permission_query(&deep), Ok(p("a")));
        let deeper = format!("{}a{}", "(".repeat(1_000), ")".repeat(1_000));
        assert_eq!(
            err(&deeper),
            (MAX_QUERY_DEPTH, format!("parentheses nest deeper than {MAX_QUERY_DEPTH} levels"))
        );
        let many = vec!["p"; 501].join(" OR ");
        assert!(err(&many).1.contains("more than 1000"), "1001 nodes");
        let ok = vec!["p"; 500].join(" OR ");
        assert!(parse_permission_query(&ok).is_ok(), "999 nodes");
        let huge = "a OR ".repeat(1_000_000);
        assert_eq!(
            err(&huge),
            (10_000, "the query is too long: more than 4000 words and parentheses".into())
        );
    }

    /// A query as text, fully parenthesized where it nests.
    fn print(q: &PermissionQuery) -> String {
        match q {
            Permission(p) => p.clone(),
            And(all) => all.iter().map(|q| format!("({})", print(q))).collect::<Vec<_>>().join(" AND "),
            Or(any) => any.iter().map(|q| format!("({})", print(q))).collect::<Vec<_>>().join(" or "),
        }
    }

    /// The query with each single-element list replaced by its element, as the parser
    /// builds it.
    fn normal(q: PermissionQuery) -> PermissionQuery {
        match q {
            And(list) | Or(list) if list.len() == 1 => normal(list.into_iter().next().expect("one element")),
            And(list) => And(list.into_iter().map(normal).collect()),
            Or(list) => Or(list.into_iter().map(normal).collect()),
            q => q,
        }
    }

    fn query() -> impl Strategy<Value = PermissionQuery> {
        let leaf = "[a-z][a-z0-9._:*/-]{0,6}"
            .prop_filter("not an operator", |s| s != "and" && s != "or")
            .prop_map(Permission);
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 1..4).prop_map(And),
                prop::collection::vec(inner, 1..4).prop_map(Or),
            ]
        })
    }

    proptest! {
        #[test]
        fn printed_queries_parse_back_and_evaluate_alike(q in query(), held in prop::collection::hash_set("[a-z][a-z0-9._:*/-]{0,6}", 0..6)) {
            let parsed = parse_permission_query(&print(&q)).expect("a printed query parses");
            prop_assert_eq!(&parsed, &normal(q.clone()));
            let holds = |name: &str| held.contains(name);
            prop_assert_eq!(parsed.satisfied_by(&holds), q.satisfied_by(&holds));
        }

        #[test]
        fn any_text_parses_or_fails_without_panicking(text in "[ a-zA-Z()éAND OR.*\t]{0,40}") {
            if let Err(e) = parse_permission_query(&text) {
                prop_assert!(e.position <= text.chars().count());
            }
        }
    }
}
