import Foundation
import _ContextStackCore

extension Condition {
    /// A condition from a Foundation predicate, translated to the same form as `%"key"`
    /// conditions (so it runs in SQL and in memory alike).
    ///
    /// For example:
    ///
    /// ```swift
    /// try world.fetchAll(Person.self, .predicate(#Predicate<Person> { $0.age > 18 && $0.name.starts(with: "M") }))
    /// // … WHERE (t0."age" > ? AND cs_text(?, ?, t0."name", ?))
    /// ```
    ///
    /// Translated: `==`, `!=`, `<`, `<=`, `>`, `>=` between a property and a value (or two
    /// properties); `&&`, `||`, `!`; `nil`, optionals, `?.` and `!` through to-one
    /// relationships and `??` with a constant default; `starts(with:)` and `contains(_:)` on
    /// strings; `[values].contains($0.key)`; `contains(where:)` and `allSatisfy` on to-many
    /// relationships (ANY / ALL); `.count` of a to-many relationship, and of
    /// `relationship.filter { … }` (a SUBQUERY); `+`, `-`, `*`, unary `-` and `/` on `Double`s
    /// (in `Double`, as format strings compute). Anything else — `Int` division, string
    /// transformations, local functions — makes a condition that throws
    /// `QueryError.unsupported` naming the expression when the fetch runs: it is never
    /// evaluated by loading every object.
    ///
    /// `$0.friend!.age` reads NULL where there is no friend (it does not crash), as SQL does.
    public static func predicate<T: ManagedObject>(_ predicate: Predicate<T>) -> Condition {
        var translator = PredicateTranslator(entity: T.self)
        translator.variables[predicate.variable.key] = ""
        do throws(QueryError) {
            return Condition(try translator.condition(predicate.expression))
        } catch {
            return Condition(.invalid(error))
        }
    }
}

/// One translated piece of a predicate expression.
enum PredicateTerm {
    /// A key path from the object (`""` is the object itself).
    case path(String, ManagedObject.Type?)
    /// A constant.
    case value(Value, AttributeKind?)
    case object(ObjectID)
    case list([Value], AttributeKind?)
    /// A Boolean condition.
    case condition(Condition.Node)
    /// `key ?? default`.
    case coalesced(String, Value)
    /// `relationship.flatMap { condition }`: nil where the relationship is nil.
    case optionalCondition(String, Condition.Node)
    /// Arithmetic, or the count of a filtered relationship: compared as `Condition.Expression`.
    case expression(Condition.Expression)
    /// `relationship.filter { condition }`, the condition on the members: only its `count` is read.
    case filtered(String, Condition.Node)
}

/// A predicate expression that can be translated (conformed to by Foundation's expression types).
protocol PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm
}

struct PredicateTranslator {
    let entity: ManagedObject.Type
    /// The key path each predicate variable stands for.
    var variables: [PredicateExpressions.VariableID: String] = [:]

    init(entity: ManagedObject.Type) { self.entity = entity }

    func unsupported(_ expression: Any, _ why: String = "") -> QueryError {
        QueryError(.unsupported, "#Predicate<\(entity)>: \(Self.name(of: expression)) cannot be translated to a query\(why.isEmpty ? "" : ": " + why). Use the supported forms (see Condition.predicate) or a %\"key\" condition.", entity: "\(entity)")
    }

    /// The expression's type without module prefixes, generic arguments shortened.
    static func name(of expression: Any) -> String {
        String(describing: type(of: expression))
            .replacingOccurrences(of: "Foundation.", with: "")
            .replacingOccurrences(of: "FoundationEssentials.", with: "")
    }

    mutating func term(_ expression: Any) throws(QueryError) -> PredicateTerm {
        guard let translatable = expression as? any PredicateTranslatable else { throw unsupported(expression) }
        return try translatable.translate(&self)
    }

    /// The expression as a condition: a Boolean expression, or a Boolean key (`$0.isActive`).
    mutating func condition(_ expression: Any) throws(QueryError) -> Condition.Node {
        switch try term(expression) {
        case .condition(let node): return node
        case .path(let key, _) where !key.isEmpty: return .compare(key, .equal, .value(.integer(1), .bool))
        case .value(.integer(let flag), .bool?): return .constant(flag != 0)
        case .optionalCondition(let wrapped, let node): return .and(.compare(wrapped, .notEqual, .value(.null, nil)), node)
        default: throw unsupported(expression, "it is not a condition")
        }
    }

    mutating func path(_ expression: Any) throws(QueryError) -> String {
        guard case .path(let key, _) = try term(expression), !key.isEmpty else {
            throw unsupported(expression, "expected a property of the object")
        }
        return key
    }

    /// Binds a closure's variable (`contains(where:)`, `flatMap`) to a key path.
    mutating func bind(_ variable: PredicateExpressions.VariableID, to key: String) {
        variables[variable] = key
    }

    /// A term as one side of an `expression` node: a key, a value, or an expression.
    func side(_ term: PredicateTerm, of expression: Any) throws(QueryError) -> Condition.Expression {
        switch term {
        case .path(let key, _) where !key.isEmpty: return .key(key)
        case .value(let value, let kind): return .constant(.value(value, kind))
        case .object(let id): return .constant(.object(id))
        case .expression(let computed): return computed
        default: throw unsupported(expression, "arithmetic takes numeric properties, values and arithmetic")
        }
    }

    /// `lhs op rhs` as arithmetic.
    mutating func arithmetic(_ lhs: Any, _ op: Condition.ArithmeticOperator, _ rhs: Any, expression: Any) throws(QueryError) -> PredicateTerm {
        .expression(.arithmetic(try side(term(lhs), of: expression), op, try side(term(rhs), of: expression)))
    }

    /// `lhs op rhs`, whichever side holds the key.
    mutating func compare(_ lhs: Any, _ op: ComparisonOperator, _ rhs: Any, expression: Any) throws(QueryError) -> PredicateTerm {
        let left = try term(lhs)
        let right = try term(rhs)
        // Arithmetic and counts of filtered members compare as expressions, whose resolution
        // checks their kinds.
        switch (left, right) {
        case (.expression, _), (_, .expression):
            return .condition(.expression(try side(left, of: expression), .compare(op), try side(right, of: expression), []))
        case (.path(let key, _), _) where !key.isEmpty:
            return .condition(try Self.compare(key, op, right, expression: expression, translator: self))
        case (_, .path(let key, _)) where !key.isEmpty:
            return .condition(try Self.compare(key, op.flipped, left, expression: expression, translator: self))
        case (.coalesced(let key, let fallback), .value(let value, let kind)), (.value(let value, let kind), .coalesced(let key, let fallback)):
            let effective: ComparisonOperator
            if case .coalesced = left { effective = op } else { effective = op.flipped }
            let stored = Condition.Node.compare(key, effective, .value(value, kind))
            return .condition(Self.holds(fallback, effective, value)
                ? .or(.compare(key, .equal, .value(.null, nil)), stored)
                : .and(.compare(key, .notEqual, .value(.null, nil)), stored))
        case (.condition(let node), .value(.integer(let flag), .bool?)), (.value(.integer(let flag), .bool?), .condition(let node)):
            guard op == .equal || op == .notEqual else { throw unsupported(expression) }
            return .condition((flag != 0) == (op == .equal) ? node : .not(node))
        case (.optionalCondition(let wrapped, let node), .value(let value, _)), (.value(let value, _), .optionalCondition(let wrapped, let node)):
            // `relationship?.test == true`: nil (no relationship) equals only nil.
            let present = Condition.Node.compare(wrapped, .notEqual, .value(.null, nil))
            let absent = Condition.Node.compare(wrapped, .equal, .value(.null, nil))
            switch (value, op) {
            case (.integer(let flag), .equal): return .condition(.and(present, flag != 0 ? node : .not(node)))
            case (.integer(let flag), .notEqual): return .condition(.or(absent, flag != 0 ? .not(node) : node))
            case (.null, .equal): return .condition(absent)
            case (.null, .notEqual): return .condition(present)
            default: throw unsupported(expression)
            }
        default:
            throw unsupported(expression, "one side must be a property of the object")
        }
    }

    private static func compare(_ key: String, _ op: ComparisonOperator, _ other: PredicateTerm, expression: Any,
                                translator: PredicateTranslator) throws(QueryError) -> Condition.Node {
        switch other {
        case .value(let value, let kind): return .compare(key, op, .value(value, kind))
        case .object(let id): return .compare(key, op, .object(id))
        case .path(let otherKey, _) where !otherKey.isEmpty: return .compare(key, op, .key(otherKey))
        default: throw translator.unsupported(expression, "compare a property with a value or another property")
        }
    }

    /// `a op b` on constants, with the NULL rules of conditions (unknown counts as false).
    static func holds(_ a: Value, _ op: ComparisonOperator, _ b: Value) -> Bool {
        switch op {
        case .equal: Value.compare(a, b) == 0
        case .notEqual: Value.compare(a, b) != 0
        default: CompiledQuery.order(a, b, op) ?? false
        }
    }

    /// A constant from a predicate: a value, an object, nil, or a list of values.
    func constant(_ value: Any, expression: Any) throws(QueryError) -> PredicateTerm {
        if let object = value as? ManagedObject { return .object(object.objectID) }
        if let id = value as? ObjectID { return .object(id) }
        if let attribute = value as? any AttributeValue { return Self.open(attribute) }
        if let raw = value as? any RawRepresentable, let attribute = raw.rawValue as? any AttributeValue { return Self.open(attribute) }
        if let sequence = value as? any Sequence {
            var values: [Value] = []
            var kind: AttributeKind?
            for element in sequence.asArray() {
                guard case .value(let stored, let elementKind) = try constant(element, expression: expression) else {
                    throw unsupported(expression, "a list holds values only")
                }
                values.append(stored)
                kind = kind ?? elementKind
            }
            return .list(values, kind)
        }
        let mirror = Mirror(reflecting: value)
        if mirror.displayStyle == .optional {
            guard let wrapped = mirror.children.first?.value else { return .value(.null, nil) }
            return try constant(wrapped, expression: expression)
        }
        throw unsupported(expression, "\(type(of: value)) is not an attribute type")
    }

    private static func open<V: AttributeValue>(_ value: V) -> PredicateTerm {
        .value(value.storedValue, V.attributeKind)
    }
}

private extension Sequence {
    func asArray() -> [Any] { map { $0 } }
}

// MARK: - Foundation's expressions

extension PredicateExpressions.Variable: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        guard let key = translator.variables[self.key] else { throw translator.unsupported(self, "an unknown variable") }
        return .path(key, Output.self as? ManagedObject.Type)
    }
}

extension PredicateExpressions.KeyPath: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        let base = try translator.term(root)
        // `relationship.filter { … }.count`: a SUBQUERY's count.
        if case .filtered(let key, let condition) = base {
            guard let collection = Root.Output.self as? any _ToManyCollection.Type, collection.isCount(keyPath) else {
                throw translator.unsupported(self, "of a filtered relationship only count can be read")
            }
            return .expression(.subquery(relationship: key, condition: condition, function: .count, member: nil))
        }
        guard case .path(let prefix, let type) = base else {
            throw translator.unsupported(self, "key paths must start at the object")
        }
        if let type, let name = type._cs_key(for: keyPath) {
            return .path(prefix.isEmpty ? name : prefix + "." + name, Output.self as? ManagedObject.Type
                         ?? (Output.self as? any _OptionalManagedObject.Type)?.wrappedType)
        }
        if !prefix.isEmpty, let collection = Root.Output.self as? any _ToManyCollection.Type, collection.isCount(keyPath) {
            return .path(prefix + ".@count", nil)
        }
        throw translator.unsupported(self, "\(keyPath) is not a persisted property")
    }
}

extension PredicateExpressions.Value: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        try translator.constant(value, expression: self)
    }
}

extension PredicateExpressions.NilLiteral: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        .value(.null, nil)
    }
}

extension PredicateExpressions.Equal: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        try translator.compare(lhs, .equal, rhs, expression: self)
    }
}

extension PredicateExpressions.NotEqual: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        try translator.compare(lhs, .notEqual, rhs, expression: self)
    }
}

extension PredicateExpressions.Comparison: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        let op: ComparisonOperator = switch self.op {
        case .lessThan: .less
        case .lessThanOrEqual: .lessOrEqual
        case .greaterThan: .greater
        case .greaterThanOrEqual: .greaterOrEqual
        @unknown default: throw translator.unsupported(self)
        }
        return try translator.compare(lhs, op, rhs, expression: self)
    }
}

extension PredicateExpressions.Conjunction: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        .condition(.and(try translator.condition(lhs), try translator.condition(rhs)))
    }
}

extension PredicateExpressions.Disjunction: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        .condition(.or(try translator.condition(lhs), try translator.condition(rhs)))
    }
}

extension PredicateExpressions.Negation: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        .condition(.not(try translator.condition(wrapped)))
    }
}

extension PredicateExpressions.ForcedUnwrap: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        try translator.term(inner)
    }
}

extension PredicateExpressions.OptionalFlatMap: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        let wrappedKey = try translator.path(wrapped)
        translator.bind(variable.key, to: wrappedKey)
        switch try translator.term(transform) {
        case .condition(let node): return .optionalCondition(wrappedKey, node)
        case .path(let key, let type): return .path(key, type)
        default: throw translator.unsupported(self, "flatMap must read a property or test a condition")
        }
    }
}

extension PredicateExpressions.NilCoalesce: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        let left = try translator.term(lhs)
        let right = try translator.term(rhs)
        switch (left, right) {
        case (.path(let key, _), .value(let fallback, _)) where !key.isEmpty:
            return .coalesced(key, fallback)
        case (.optionalCondition(let wrapped, let node), .value(.integer(let flag), .bool?)):
            // `relationship?.test ?? flag`: the flag where the relationship is nil.
            return .condition(flag != 0
                ? .or(.compare(wrapped, .equal, .value(.null, nil)), node)
                : .and(.compare(wrapped, .notEqual, .value(.null, nil)), node))
        default:
            throw translator.unsupported(self, "?? takes a property or an optional test on the left and a constant on the right")
        }
    }
}

extension PredicateExpressions.SequenceStartsWith: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        let key = try translator.path(base)
        guard case .value(.text(let text), _) = try translator.term(prefix) else {
            throw translator.unsupported(self, "starts(with:) takes a string constant")
        }
        return .condition(.text(key, .beginsWith, text, []))
    }
}

extension PredicateExpressions.CollectionContainsCollection: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        let key = try translator.path(base)
        guard case .value(.text(let text), _) = try translator.term(other) else {
            throw translator.unsupported(self, "contains(_:) on a string takes a string constant")
        }
        return .condition(.text(key, .contains, text, []))
    }
}

extension PredicateExpressions.SequenceContains: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        guard case .list(let values, let kind) = try translator.term(sequence) else {
            throw translator.unsupported(self, "contains(_:) takes a list of values and a property ([18, 19].contains($0.age)); for a to-many relationship use contains(where:)")
        }
        let key = try translator.path(element)
        // Swift's `contains` is two-valued: a nil property is in the list when the list holds
        // nil, and out of it otherwise — also under a `!`. SQL's `IN` with a NULL is neither,
        // so the property is tested for nil first, with the null-safe comparisons.
        let present = values.filter { if case .null = $0 { return false } else { return true } }
        // (Only where the property can be nil: an optional, or one reached through an optional.)
        let mayBeNil = RHS.Output.self is any _OptionalManagedObject.Type
        let inList = Condition.Node.oneOf(key, present.map { .value($0, kind) })
        var node: Condition.Node? = present.isEmpty ? nil
            : mayBeNil ? .and(.compare(key, .notEqual, .value(.null, kind)), inList) : inList
        if present.count < values.count {
            let isNil = Condition.Node.compare(key, .equal, .value(.null, kind))
            node = node.map { .or($0, isNil) } ?? isNil
        }
        return .condition(node ?? .constant(false))
    }
}

extension PredicateExpressions.SequenceContainsWhere: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        let key = try translator.path(sequence)
        translator.bind(variable.key, to: key)
        return .condition(.quantified(.any, key + ".*", try translator.condition(test)))
    }
}

extension PredicateExpressions.SequenceAllSatisfy: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        let key = try translator.path(sequence)
        translator.bind(variable.key, to: key)
        return .condition(.quantified(.all, key + ".*", try translator.condition(test)))
    }
}

extension PredicateExpressions.Filter: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        let key = try translator.path(sequence)
        // The test reads the members only: keys of the object outside are not bound, so they
        // throw (SUBQUERY's outer keys have no typed form).
        var members = PredicateTranslator(entity: translator.entity)
        members.variables[variable.key] = ""
        return .filtered(key, try members.condition(filter))
    }
}

extension PredicateExpressions.Arithmetic: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        let operation: Condition.ArithmeticOperator = switch op {
        case .add: .add
        case .subtract: .subtract
        case .multiply: .multiply
        }
        return try translator.arithmetic(lhs, operation, rhs, expression: self)
    }
}

extension PredicateExpressions.FloatDivision: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        try translator.arithmetic(lhs, .divide, rhs, expression: self)
    }
}

extension PredicateExpressions.UnaryMinus: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        .expression(.arithmetic(.constant(.value(.integer(0), .int)), .subtract, try translator.side(translator.term(wrapped), of: self)))
    }
}

extension PredicateExpressions.IntDivision: PredicateTranslatable {
    func translate(_ translator: inout PredicateTranslator) throws(QueryError) -> PredicateTerm {
        throw translator.unsupported(self, "Int division truncates, and queries compute in Double (7 / 2 is 3.5); divide Double properties, or multiply instead ($0.age > 2 * 7)")
    }
}

// MARK: - Helpers for key paths

/// `Set<Member>`, the type of to-many relationships: recognizes its `count`.
protocol _ToManyCollection {
    static func isCount(_ keyPath: AnyKeyPath) -> Bool
}

extension Set: _ToManyCollection {
    static func isCount(_ keyPath: AnyKeyPath) -> Bool { keyPath == \Set<Element>.count }
}

/// `[Member]`, what `filter` returns.
extension Array: _ToManyCollection {
    static func isCount(_ keyPath: AnyKeyPath) -> Bool { keyPath == \[Element].count }
}

/// Every `Optional`: the type of to-one relationships (`Optional<SomeEntity>`, with its
/// entity), and of properties that may be nil (`SequenceContains`).
protocol _OptionalManagedObject {
    static var wrappedType: ManagedObject.Type? { get }
}

extension Optional: _OptionalManagedObject {
    static var wrappedType: ManagedObject.Type? { Wrapped.self as? ManagedObject.Type }
}
