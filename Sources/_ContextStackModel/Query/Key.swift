import _ContextStackCore

prefix operator %
postfix operator %

/// A key of an entity in a predicate: an attribute, a to-one relationship, or a dotted path
/// through to-one relationships (`"friend.age"`). Write it `%"name"` or `"name"%`.
///
/// For example:
///
/// ```swift
/// try world.fetchAll(Person.self, %"age" >= 18 && %"friend.name" == "Knight")
/// // SELECT … FROM "Person" AS t0 LEFT JOIN "Person" AS t1 ON t1."Z_PK" = t0."friend"
/// //   WHERE (t0."age" >= ? AND t1."name" IS ?) ORDER BY t0."Z_PK" ASC
/// ```
public struct Key: Hashable, Sendable, CustomStringConvertible {
    /// The key path as written, dot-separated.
    public let path: String
    /// How the key's comparisons treat text: `[]` (exactly, byte by byte) unless made with
    /// `caseInsensitive` or `diacriticInsensitive`.
    public let options: MatchOptions

    public init(_ path: String) {
        self.path = path
        self.options = []
    }

    private init(_ path: String, options: MatchOptions) {
        self.path = path
        self.options = options
    }

    /// The same key, compared without regard to case: `%"name"%.caseInsensitive == "ada"` is
    /// the format string's `name ==[c] 'ada'`. It applies to every operator (`<`, `in`,
    /// `between`, the string operators) and changes nothing on keys that are not text.
    public var caseInsensitive: Key { Key(path, options: options.union(.caseInsensitive)) }

    /// The same key, compared without regard to diacritics ("é" equals "e"): `[d]`.
    public var diacriticInsensitive: Key { Key(path, options: options.union(.diacriticInsensitive)) }

    public var description: String { path + options.formatSuffix }
}

/// `%"name"`: a `Key`.
public prefix func % (path: String) -> Key { Key(path) }
/// `"name"%`: a `Key`.
public postfix func % (path: String) -> Key { Key(path) }
/// `%` on a key is the identity, so `%"name"%` reads as one unit.
public prefix func % (key: Key) -> Key { key }
/// `%` on a condition is the identity, so `%"name"%.contains("x")` reads as one unit.
public prefix func % (condition: Condition) -> Condition { condition }
