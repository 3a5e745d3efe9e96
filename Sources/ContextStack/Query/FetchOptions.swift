/// The order of fetched objects: `.ascending("name") | .descending("age")`.
///
/// Ascending order puts NULL first, descending puts it last (as SQLite does); strings sort by
/// their UTF-8 bytes. Objects that tie on every key come in primary-key order, so a fetch with
/// a limit is deterministic.
public struct OrderBy: Sendable, CustomStringConvertible {
    struct Term: Sendable {
        let key: String
        let ascending: Bool
    }
    let terms: [Term]

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

/// Options of a fetch, joined with `|`: `.limit(100) | .offset(20)`.
public struct FetchOptions: Sendable {
    /// At most this many objects.
    public var limit: Int?
    /// Skip this many objects first.
    public var offset: Int?
    /// Rows that are equal in every selected value come once (aggregate queries).
    public var distinct = false

    public init() {}

    /// Equal rows once (for `query`).
    public static var distinct: FetchOptions {
        var options = FetchOptions()
        options.distinct = true
        return options
    }

    /// At most `count` objects.
    public static func limit(_ count: Int) -> FetchOptions {
        var options = FetchOptions()
        options.limit = count
        return options
    }

    /// Skip the first `count` objects.
    public static func offset(_ count: Int) -> FetchOptions {
        var options = FetchOptions()
        options.offset = count
        return options
    }

    /// Both options; where both set the same one, the right side wins.
    public static func | (lhs: FetchOptions, rhs: FetchOptions) -> FetchOptions {
        var options = lhs
        if let limit = rhs.limit { options.limit = limit }
        if let offset = rhs.offset { options.offset = offset }
        options.distinct = lhs.distinct || rhs.distinct
        return options
    }
}
