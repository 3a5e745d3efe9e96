import Foundation
import _ContextStackCore

/// A predicate over the objects of an entity: the `where` of a fetch.
///
/// Build conditions with keys and operators — `%"name" == "Monk" && %"age" > 18` — and combine
/// them with `&&`, `||` and `!`. A condition is checked against the model when it runs (an
/// unknown key or a value of the wrong type throws `QueryError`), compiled to SQL with bound
/// values for the store, and evaluated in memory for pending changes, with the same result.
///
/// NULL rules, the same in SQL and in memory: `== nil` matches NULL; `!= x` matches NULL;
/// ordering comparisons (`<`, `>`, …) never match NULL, and neither does their negation
/// (`!(%"age" > 3)` does not match an object whose age is NULL — SQL's three-valued logic).
/// Strings compare by their UTF-8 bytes (case- and accent-sensitive).
public struct Condition: Sendable, CustomStringConvertible {
    package indirect enum Node: Sendable {
        case constant(Bool)
        case compare(String, ComparisonOperator, Operand)
        /// A string operator: the key's text against a pattern.
        case text(String, TextOperator, String, MatchOptions)
        /// The key's value is one of the values (SQL `IN`).
        case oneOf(String, [Operand])
        /// The key's value lies between two values, both included.
        case between(String, Operand, Operand)
        /// A condition on the members of a to-many relationship: the node's keys are full
        /// paths that go through that relationship.
        case quantified(Quantifier, String, Node)
        /// A comparison of two expressions, for what the cases above cannot say: options on a
        /// comparison (`name ==[c] 'ada'`), `SELF`, a value on the left of IN or CONTAINS,
        /// variables. Resolution lowers it to the same compiled forms as the cases above.
        case expression(Expression, PredicateOperator, Expression, MatchOptions)
        case and(Node, Node)
        case or(Node, Node)
        case not(Node)
        /// A condition that could not be built (a malformed format string, an argument of the
        /// wrong type): using it throws this error, so building one never throws or crashes.
        case invalid(QueryError)
    }

    package enum Operand: Sendable {
        /// A value, with the kind of attribute it came from (`nil` for a bare `nil`).
        case value(Value, AttributeKind?)
        case key(String)
        case object(ObjectID)
    }

    /// One side of an `expression` node.
    package indirect enum Expression: Sendable {
        /// A key path of the object evaluated.
        case key(String)
        /// A value or an object (never `.key`: that is `key(_:)`).
        case constant(Operand)
        /// `{a, b}`, or an array passed for `%@`.
        case list([Operand])
        /// A list with variables among its items (`{$LOW, $HIGH}`), each item a `.constant` or
        /// a `.variable`: `substituting(_:)` makes it a `.list`; an error when used without.
        case listWithVariables([Expression])
        /// `SELF`: the object evaluated.
        case evaluatedObject
        /// `$name`: replaced by a value with `substituting(_:)`; an error when used without one.
        case variable(String)
        /// `left + right`, `-`, `*`, `/`, `**`, computed in `Double` as Foundation computes it.
        case arithmetic(Expression, ArithmeticOperator, Expression)
        /// `now()`: the time the query is compiled.
        case now
        /// `SUBQUERY(relationship, $member, condition).@count` (or `.@sum.key`, …): the members
        /// of one of the object's to-many relationships that match `condition`, whose keys are
        /// the members' (`$member.age` is written `age`), with `.outer` for the object's own.
        case subquery(relationship: String, condition: Node, function: CollectionFunction, member: String?)
        /// In a SUBQUERY's condition, a key of the object outside it (a bare `age` in
        /// `SUBQUERY(pets, $p, $p.age > age)`).
        case outer(String)

        /// The name of the variable this side is, or the first among its list's items.
        var firstVariable: String? {
            switch self {
            case .variable(let name): name
            case .listWithVariables(let items): items.lazy.compactMap(\.firstVariable).first
            default: nil
            }
        }
    }

    /// An arithmetic operator of a format string.
    package enum ArithmeticOperator: String, Sendable, CaseIterable {
        case add = "+"
        case subtract = "-"
        case multiply = "*"
        case divide = "/"
        case power = "**"

        /// The operator applied to two values with Foundation's rule (both as `Double`) and
        /// SQL's NULL rule: NULL when either is NULL or not a number, when dividing by zero, or
        /// when the result is not a number (SQLite stores NaN as NULL).
        package func apply(_ a: Value, _ b: Value) -> Value {
            guard let x = a.doubleValue, let y = b.doubleValue else { return .null }
            let result: Double
            switch self {
            case .add: result = x + y
            case .subtract: result = x - y
            case .multiply: result = x * y
            case .divide:
                guard y != 0 else { return .null }
                result = x / y
            case .power: result = pow(x, y)
            }
            return result.isNaN ? .null : .double(result)
        }
    }

    /// The operator of an `expression` node.
    package enum PredicateOperator: Sendable {
        case compare(ComparisonOperator)
        case isIn
        case between
        case text(TextOperator)

        var isBetween: Bool { if case .between = self { true } else { false } }

        var spelling: String {
            switch self {
            case .compare(let op): op.rawValue
            case .isIn: "IN"
            case .between: "BETWEEN"
            case .text(let op): op.rawValue
            }
        }
    }

    package let node: Node

    init(_ node: Node) { self.node = node }

    /// A condition every object matches.
    public static let all = Condition(.constant(true))
    /// A condition no object matches.
    public static let none = Condition(.constant(false))

    public var description: String { Self.describe(node) }

    private static func describe(_ node: Node) -> String {
        switch node {
        case .constant(let value): return value ? "TRUEPREDICATE" : "FALSEPREDICATE"
        case .compare(let key, let op, let operand):
            return "\(key) \(op.rawValue) \(describe(operand))"
        case .text(let key, let op, let pattern, let options):
            return "\(key) \(op.rawValue)\(options.formatSuffix) \(String(reflecting: pattern))"
        case .oneOf(let key, let values):
            return "\(key) IN {\(values.map(describe).joined(separator: ", "))}"
        case .between(let key, let low, let high):
            return "\(key) BETWEEN {\(describe(low)), \(describe(high))}"
        case .quantified(let quantifier, _, let inner):
            return "\(quantifier.rawValue) \(describe(inner))"
        case .expression(let left, let op, let right, let options):
            return "\(describe(left)) \(op.spelling)\(options.formatSuffix) \(describe(right))"
        case .and: return "(" + node.chain().map(describe).joined(separator: " AND ") + ")"
        case .or: return "(" + node.chain().map(describe).joined(separator: " OR ") + ")"
        case .not(let a): return "NOT (\(describe(a)))"
        case .invalid(let error): return "<invalid: \(error.message)>"
        }
    }

    private static func describe(_ expression: Expression) -> String {
        switch expression {
        case .key(let key): key
        case .constant(let operand): describe(operand)
        case .list(let items): "{\(items.map(describe).joined(separator: ", "))}"
        case .listWithVariables(let items): "{\(items.map(describe).joined(separator: ", "))}"
        case .evaluatedObject: "SELF"
        case .variable(let name): "$" + name
        case .arithmetic(let left, let op, let right): "(\(describe(left)) \(op.rawValue) \(describe(right)))"
        case .now: "now()"
        case .subquery(let relationship, let condition, let function, let member):
            "SUBQUERY(\(relationship), $m, \(describe(condition))).@\(function.rawValue)\(member.map { "." + $0 } ?? "")"
        case .outer(let key): "outer." + key
        }
    }

    private static func describe(_ operand: Operand) -> String {
        switch operand {
        case .value(let value, _): value.description
        case .key(let key): key
        case .object(let id): id.description
        }
    }
}

package enum ComparisonOperator: String, Sendable, CaseIterable {
    case equal = "=="
    case notEqual = "!="
    case less = "<"
    case lessOrEqual = "<="
    case greater = ">"
    case greaterOrEqual = ">="

    package var isOrdering: Bool { self != .equal && self != .notEqual }
}

// MARK: - Chains

extension Condition.Node {
    /// The operands of a chain of this node's operator (`a && b && c`, however it is nested —
    /// `reduce` builds chains thousands deep), in order, found without recursion; `[self]` for
    /// any other node.
    package func chain() -> [Condition.Node] {
        let isAnd: Bool
        switch self {
        case .and: isAnd = true
        case .or: isAnd = false
        default: return [self]
        }
        var operands: [Condition.Node] = []
        var pending = [self]
        while let node = pending.popLast() {
            switch (node, isAnd) {
            case (.and(let a, let b), true), (.or(let a, let b), false):
                pending.append(b)
                pending.append(a)
            default:
                operands.append(node)
            }
        }
        return operands
    }
}

/// `operands` joined by a binary operator as a balanced tree: a chain of n operands nests
/// log n deep (in memory, in recursion and in the SQL it becomes), not n.
func balanced<Node>(_ operands: ArraySlice<Node>, _ join: (Node, Node) -> Node) -> Node {
    if operands.count == 1 { return operands[operands.startIndex] }
    let middle = operands.startIndex + (operands.count + 1) / 2
    return join(balanced(operands[..<middle], join), balanced(operands[middle...], join))
}

// MARK: - Combining

extension Condition {
    public static func && (lhs: Condition, rhs: Condition) -> Condition { Condition(.and(lhs.node, rhs.node)) }
    public static func || (lhs: Condition, rhs: Condition) -> Condition { Condition(.or(lhs.node, rhs.node)) }
    public static prefix func ! (condition: Condition) -> Condition { Condition(.not(condition.node)) }
}

// MARK: - Comparisons

extension Key {
    private func compare(_ op: ComparisonOperator, _ operand: Condition.Operand) -> Condition {
        guard !options.isEmpty else { return Condition(.compare(path, op, operand)) }
        if case .key(let other) = operand { return Condition(.expression(.key(path), .compare(op), .key(other), options)) }
        return Condition(.expression(.key(path), .compare(op), .constant(operand), options))
    }

    private static func operand<V: AttributeValue>(_ value: V) -> Condition.Operand {
        .value(value.storedValue, V.attributeKind)
    }

    private static func operand<V: RawRepresentable>(_ value: V) -> Condition.Operand where V.RawValue: AttributeValue {
        .value(value.rawValue.storedValue, V.RawValue.attributeKind)
    }

    // Against a value.
    public static func == <V: AttributeValue>(key: Key, value: V) -> Condition { key.compare(.equal, operand(value)) }
    public static func != <V: AttributeValue>(key: Key, value: V) -> Condition { key.compare(.notEqual, operand(value)) }
    public static func < <V: AttributeValue>(key: Key, value: V) -> Condition { key.compare(.less, operand(value)) }
    public static func <= <V: AttributeValue>(key: Key, value: V) -> Condition { key.compare(.lessOrEqual, operand(value)) }
    public static func > <V: AttributeValue>(key: Key, value: V) -> Condition { key.compare(.greater, operand(value)) }
    public static func >= <V: AttributeValue>(key: Key, value: V) -> Condition { key.compare(.greaterOrEqual, operand(value)) }

    // Against an enum case, through its raw value.
    public static func == <V: RawRepresentable>(key: Key, value: V) -> Condition where V.RawValue: AttributeValue { key.compare(.equal, operand(value)) }
    public static func != <V: RawRepresentable>(key: Key, value: V) -> Condition where V.RawValue: AttributeValue { key.compare(.notEqual, operand(value)) }

    // Against nil.
    public static func == (key: Key, _: _OptionalNilComparisonType) -> Condition { key.compare(.equal, .value(.null, nil)) }
    public static func != (key: Key, _: _OptionalNilComparisonType) -> Condition { key.compare(.notEqual, .value(.null, nil)) }

    // Against another key of the same object.
    public static func == (lhs: Key, rhs: Key) -> Condition { lhs.compare(.equal, .key(rhs.path)) }
    public static func != (lhs: Key, rhs: Key) -> Condition { lhs.compare(.notEqual, .key(rhs.path)) }
    public static func < (lhs: Key, rhs: Key) -> Condition { lhs.compare(.less, .key(rhs.path)) }
    public static func <= (lhs: Key, rhs: Key) -> Condition { lhs.compare(.lessOrEqual, .key(rhs.path)) }
    public static func > (lhs: Key, rhs: Key) -> Condition { lhs.compare(.greater, .key(rhs.path)) }
    public static func >= (lhs: Key, rhs: Key) -> Condition { lhs.compare(.greaterOrEqual, .key(rhs.path)) }

    // Against an object or its ID: a to-one relationship pointing at it.
    public static func == (key: Key, object: ManagedObject?) -> Condition {
        key.compare(.equal, object.map { .object($0.objectID) } ?? .value(.null, nil))
    }
    public static func != (key: Key, object: ManagedObject?) -> Condition {
        key.compare(.notEqual, object.map { .object($0.objectID) } ?? .value(.null, nil))
    }
    public static func == (key: Key, id: ObjectID) -> Condition { key.compare(.equal, .object(id)) }
    public static func != (key: Key, id: ObjectID) -> Condition { key.compare(.notEqual, .object(id)) }
}
