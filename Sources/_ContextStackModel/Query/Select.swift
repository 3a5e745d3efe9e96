import _ContextStackCore

/// What an aggregate query returns per row: keys and aggregates, each under an alias, joined
/// with `|`.
///
/// For example:
///
/// ```swift
/// let rows = try world.query(Person.self, .select("location") | .average("age", alias: "avgAge"),
///                            groupBy: %"location")
/// // SELECT t0."location" AS "location", avg(t0."age") AS "avgAge" FROM "Person" AS t0
/// //   GROUP BY t0."location"
/// ```
///
/// Without `alias:`, a key is named by itself and an aggregate like `"average(age)"`.
public struct Select: Sendable {
    package enum Function: String, Sendable {
        case average, sum, stdDev, min, max, median, count
    }

    struct Term: Sendable {
        let key: String
        let function: Function?
        let alias: String
    }

    let terms: [Term]

    /// The values of `keys` (attributes or to-one key paths), each named by itself.
    public static func select(_ keys: String...) -> Select {
        Select(terms: keys.map { Term(key: $0, function: nil, alias: $0) })
    }

    /// The value of one key under another name: `.expression("friend.name", alias: "friend")`.
    public static func expression(_ key: String, alias: String) -> Select {
        Select(terms: [Term(key: key, function: nil, alias: alias)])
    }

    /// The average of `key` (NULLs ignored).
    public static func average(_ key: String, alias: String? = nil) -> Select { aggregate(.average, key, alias) }
    /// The sum of `key` (0 over no rows, as Core Data gives).
    public static func sum(_ key: String, alias: String? = nil) -> Select { aggregate(.sum, key, alias) }
    /// The population standard deviation of `key`.
    public static func stdDev(_ key: String, alias: String? = nil) -> Select { aggregate(.stdDev, key, alias) }
    /// The smallest value of `key`.
    public static func min(_ key: String, alias: String? = nil) -> Select { aggregate(.min, key, alias) }
    /// The largest value of `key`.
    public static func max(_ key: String, alias: String? = nil) -> Select { aggregate(.max, key, alias) }
    /// The median of `key` (the mean of the middle two for an even count).
    public static func median(_ key: String, alias: String? = nil) -> Select { aggregate(.median, key, alias) }
    /// How many rows have a non-NULL `key`.
    public static func count(_ key: String, alias: String? = nil) -> Select { aggregate(.count, key, alias) }

    private static func aggregate(_ function: Function, _ key: String, _ alias: String?) -> Select {
        Select(terms: [Term(key: key, function: function, alias: alias ?? "\(function.rawValue)(\(key))")])
    }

    /// Both selections, left first.
    public static func | (lhs: Select, rhs: Select) -> Select { Select(terms: lhs.terms + rhs.terms) }

    var hasAggregate: Bool { terms.contains { $0.function != nil } }
}

/// Keys to group by: `%"location" | %"name"`.
public struct KeyList: Sendable {
    let keys: [Key]
    public static func | (lhs: KeyList, rhs: Key) -> KeyList { KeyList(keys: lhs.keys + [rhs]) }
}

extension Key {
    /// Both keys, for `groupBy:`.
    public static func | (lhs: Key, rhs: Key) -> KeyList { KeyList(keys: [lhs, rhs]) }
}

/// Something `groupBy:` takes: one `Key`, or several joined with `|`.
public protocol KeyListConvertible: Sendable {
    var keyList: KeyList { get }
}

extension Key: KeyListConvertible {
    public var keyList: KeyList { KeyList(keys: [self]) }
}

extension KeyList: KeyListConvertible {
    public var keyList: KeyList { self }
}

/// One row of an aggregate query, its values by alias.
public struct Row: Sendable, CustomStringConvertible {
    /// The aliases, in the order of the selection.
    public let columns: [String]
    /// The values, in the same order.
    public let values: [Value]

    /// The value under `alias`, or `nil` when the query selected no such alias.
    public subscript(_ alias: String) -> Value? {
        columns.firstIndex(of: alias).map { values[$0] }
    }

    public var description: String {
        "[" + zip(columns, values).map { "\($0): \($1)" }.joined(separator: ", ") + "]"
    }
}
