import _ContextStackCore

/// The order of fetched objects: `.ascending("name") | .descending("age")`.
///
/// Ascending order puts NULL first, descending puts it last (as SQLite does); strings sort by
/// their UTF-8 bytes. Objects that tie on every key come in primary-key order, so a fetch with
/// a limit is deterministic.
public struct OrderBy: Sendable, CustomStringConvertible {
    package struct Term: Sendable {
        package let key: String
        package let ascending: Bool
        /// Set when the term could not be built (a key path that is not a persisted property):
        /// sorting by it throws this error.
        var invalid: QueryError?

        package init(key: String, ascending: Bool, invalid: QueryError? = nil) {
            self.key = key
            self.ascending = ascending
            self.invalid = invalid
        }
    }
    package let terms: [Term]

    package init(terms: [Term]) {
        self.terms = terms
    }

    /// Ascending by `key`.
    public static func ascending(_ key: String) -> OrderBy { OrderBy(terms: [Term(key: key, ascending: true)]) }
    /// Descending by `key`.
    public static func descending(_ key: String) -> OrderBy { OrderBy(terms: [Term(key: key, ascending: false)]) }
    /// Ascending by `key`.
    public static func ascending(_ key: Key) -> OrderBy { ascending(key.path) }
    /// Descending by `key`.
    public static func descending(_ key: Key) -> OrderBy { descending(key.path) }

    /// Sorts by `lhs`, then by `rhs` among ties.
    public static func | (lhs: OrderBy, rhs: OrderBy) -> OrderBy { OrderBy(terms: lhs.terms + rhs.terms) }

    public var description: String { terms.map { "\($0.key) \($0.ascending ? "ASC" : "DESC")" }.joined(separator: ", ") }
}
