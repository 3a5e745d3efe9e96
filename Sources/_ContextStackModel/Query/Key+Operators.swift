import _ContextStackCore

/// How a condition on a to-many relationship's members combines them.
public enum Quantifier: String, Sendable {
    /// At least one member matches.
    case any = "ANY"
    /// Every member matches (true for no members).
    case all = "ALL"
    /// No member matches.
    case none = "NONE"
}

extension Key {
    /// The value is one of `values`.
    ///
    /// For example: `%"age"%.in([18, 19])` — SQL `t0."age" IN (?, ?)`. A NULL value matches
    /// nothing.
    public func `in`<V: AttributeValue>(_ values: [V]) -> Condition {
        oneOf(values.map { .value($0.storedValue, V.attributeKind) })
    }

    /// The value is one of `values` (enum cases, by raw value).
    public func `in`<V: RawRepresentable>(_ values: [V]) -> Condition where V.RawValue: AttributeValue {
        oneOf(values.map { .value($0.rawValue.storedValue, V.RawValue.attributeKind) })
    }

    private func oneOf(_ list: [Condition.Operand]) -> Condition {
        options.isEmpty ? Condition(.oneOf(path, list)) : Condition(.expression(.key(path), .isIn, .list(list), options))
    }

    /// The value lies between `low` and `high`, both included.
    ///
    /// For example: `%"age"%.between(1, 5)` — SQL `t0."age" BETWEEN ? AND ?`.
    public func between<V: AttributeValue>(_ low: V, _ high: V) -> Condition {
        let bounds: [Condition.Operand] = [.value(low.storedValue, V.attributeKind), .value(high.storedValue, V.attributeKind)]
        guard !options.isEmpty else { return Condition(.between(path, bounds[0], bounds[1])) }
        return Condition(.expression(.key(path), .between, .list(bounds), options))
    }

    /// The text matches a wildcard pattern: `*` is any run of characters, `?` exactly one, and
    /// a backslash makes the character after it literal (`"a\\*b"` matches "a*b").
    ///
    /// For example: `%"name"%.like("M*")`.
    public func like(_ pattern: String, options: MatchOptions = []) -> Condition {
        Condition(.text(path, .like, pattern, self.options.union(options)))
    }

    /// The text contains `text`.
    public func contains(_ text: String, options: MatchOptions = []) -> Condition {
        Condition(.text(path, .contains, text, self.options.union(options)))
    }

    /// The text begins with `prefix`.
    public func beginsWith(_ prefix: String, options: MatchOptions = []) -> Condition {
        Condition(.text(path, .beginsWith, prefix, self.options.union(options)))
    }

    /// The text ends with `suffix`.
    public func endsWith(_ suffix: String, options: MatchOptions = []) -> Condition {
        Condition(.text(path, .endsWith, suffix, self.options.union(options)))
    }

    /// The whole text matches the regular expression (ICU syntax, as `NSRegularExpression`).
    ///
    /// For example: `%"name"%.matches("^M.*k$")`.
    public func matches(_ regularExpression: String, options: MatchOptions = []) -> Condition {
        Condition(.text(path, .matches, regularExpression, self.options.union(options)))
    }

    /// At least one member of the to-many relationship in the path matches:
    /// `%"pets.name"%.any == "Rex"`.
    public var any: QuantifiedKey { QuantifiedKey(quantifier: .any, key: self) }
    /// Every member matches: `%"pets.age"%.all > 1` (true when there are no members).
    public var all: QuantifiedKey { QuantifiedKey(quantifier: .all, key: self) }
    /// No member matches: `%"pets.name"%.none == "Rex"`.
    public var none: QuantifiedKey { QuantifiedKey(quantifier: .none, key: self) }
}

/// A key through a to-many relationship with a quantifier: `%"pets.name"%.any`.
public struct QuantifiedKey: Sendable {
    let quantifier: Quantifier
    let key: Key

    private func wrap(_ condition: Condition) -> Condition {
        Condition(.quantified(quantifier, key.path, condition.node))
    }

    public static func == <V: AttributeValue>(lhs: QuantifiedKey, rhs: V) -> Condition { lhs.wrap(lhs.key == rhs) }
    public static func != <V: AttributeValue>(lhs: QuantifiedKey, rhs: V) -> Condition { lhs.wrap(lhs.key != rhs) }
    public static func < <V: AttributeValue>(lhs: QuantifiedKey, rhs: V) -> Condition { lhs.wrap(lhs.key < rhs) }
    public static func <= <V: AttributeValue>(lhs: QuantifiedKey, rhs: V) -> Condition { lhs.wrap(lhs.key <= rhs) }
    public static func > <V: AttributeValue>(lhs: QuantifiedKey, rhs: V) -> Condition { lhs.wrap(lhs.key > rhs) }
    public static func >= <V: AttributeValue>(lhs: QuantifiedKey, rhs: V) -> Condition { lhs.wrap(lhs.key >= rhs) }
    public static func == (lhs: QuantifiedKey, _: _OptionalNilComparisonType) -> Condition { lhs.wrap(lhs.key == nil) }
    public static func != (lhs: QuantifiedKey, _: _OptionalNilComparisonType) -> Condition { lhs.wrap(lhs.key != nil) }

    public func `in`<V: AttributeValue>(_ values: [V]) -> Condition { wrap(key.in(values)) }
    public func between<V: AttributeValue>(_ low: V, _ high: V) -> Condition { wrap(key.between(low, high)) }
    public func like(_ pattern: String, options: MatchOptions = []) -> Condition { wrap(key.like(pattern, options: options)) }
    public func contains(_ text: String, options: MatchOptions = []) -> Condition { wrap(key.contains(text, options: options)) }
    public func beginsWith(_ prefix: String, options: MatchOptions = []) -> Condition { wrap(key.beginsWith(prefix, options: options)) }
    public func endsWith(_ suffix: String, options: MatchOptions = []) -> Condition { wrap(key.endsWith(suffix, options: options)) }
    public func matches(_ regularExpression: String, options: MatchOptions = []) -> Condition { wrap(key.matches(regularExpression, options: options)) }
}

/// `%` on a quantified key is the identity, so `%"pets.name"%.any == "Rex"` reads as one unit.
public prefix func % (key: QuantifiedKey) -> QuantifiedKey { key }

extension Key {
    /// The number of members of this to-many relationship that match `condition`, whose keys
    /// are the members' — a SUBQUERY: `%"pets"%.count(where: %"age" > 3) > 1` is
    /// `SUBQUERY(pets, $p, $p.age > 3).@count > 1`.
    public func count(where condition: Condition) -> MemberCount {
        MemberCount(relationship: path, condition: condition)
    }
}

/// How many members of a to-many relationship match a condition (`Key.count(where:)`), compared
/// with a number.
public struct MemberCount: Sendable {
    let relationship: String
    let condition: Condition

    private func compare(_ op: ComparisonOperator, _ count: Int) -> Condition {
        let counted = Condition.Expression.subquery(relationship: relationship, condition: condition.node, function: .count, member: nil)
        return Condition(.expression(counted, .compare(op), .constant(.value(.integer(Int64(count)), .int)), []))
    }

    public static func == (lhs: MemberCount, rhs: Int) -> Condition { lhs.compare(.equal, rhs) }
    public static func != (lhs: MemberCount, rhs: Int) -> Condition { lhs.compare(.notEqual, rhs) }
    public static func < (lhs: MemberCount, rhs: Int) -> Condition { lhs.compare(.less, rhs) }
    public static func <= (lhs: MemberCount, rhs: Int) -> Condition { lhs.compare(.lessOrEqual, rhs) }
    public static func > (lhs: MemberCount, rhs: Int) -> Condition { lhs.compare(.greater, rhs) }
    public static func >= (lhs: MemberCount, rhs: Int) -> Condition { lhs.compare(.greaterOrEqual, rhs) }
}

/// Lets `%"pets"%.count(where: …)` read as the other `%"key"%.method(…)` forms do.
public prefix func % (count: MemberCount) -> MemberCount { count }
