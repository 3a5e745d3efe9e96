import Foundation
import _ContextStackCore

extension CompiledQuery {
    /// Resolves a condition against one entity: the state that resolution gathers for the
    /// query (the hops to join, the to-many relationships read, the keys of the object outside
    /// a SUBQUERY), and the resolution of each node.
    final class Resolver {
        let entity: ResolvedEntity
        let dialect: any SQLDialect
        let aliasPrefix: String
        /// In a SUBQUERY's condition, the entity of the object outside it, which bare keys read.
        let outerEntity: ResolvedEntity?
        /// `now()`: one instant for the whole query.
        let now: Instant
        // Without run-time exclusivity checks: a resolver lives in one query's compilation, on
        // one thread, and nothing it calls reaches back into these while it changes them.
        @exclusivity(unchecked) var uses: [(hops: [Property], property: Property, inner: CompiledQuery?)] = []
        @exclusivity(unchecked) var chains: [String: [Property]] = [:]
        /// The keys of the outer object the condition reads (their joins are the outer query's).
        @exclusivity(unchecked) var outerPaths: [ResolvedPath] = []
        /// Nested queries made so far (quantifiers, subqueries), for unique table aliases.
        @exclusivity(unchecked) var nested = 0

        init(entity: ResolvedEntity, dialect: any SQLDialect, aliasPrefix: String, outerEntity: ResolvedEntity?, now: Instant) {
            self.entity = entity
            self.dialect = dialect
            self.aliasPrefix = aliasPrefix
            self.outerEntity = outerEntity
            self.now = now
        }

        func note(_ path: ResolvedPath) {
            if !path.hops.isEmpty { chains[path.joinKey] = path.hops }
            if let collection = path.collection { uses.append(([], path.leaf, collection.filter)) }
        }

        /// A query over the members of `property`, for a quantifier or a SUBQUERY.
        func members(of property: Property, _ condition: Condition.Node, outer: Bool) throws(QueryError) -> CompiledQuery {
            nested += 1
            let query = try CompiledQuery(entity: property.destination!, condition: Condition(condition), orderBy: nil,
                                          aliasPrefix: "\(aliasPrefix)\(outer ? "s" : "q")\(nested)_", dialect: dialect,
                                          outerEntity: outer ? entity : nil, now: now)
            for path in query.outerPaths { note(path) }
            return query
        }

        func quantify(_ quantifier: Quantifier, _ key: String, _ inner: Condition.Node) throws(QueryError) -> Node {
            // To-one hops first (`friend.pets.name`), then the to-many relationship quantified.
            let parts = key.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            var hops: [Property] = []
            var owner = entity
            var index = 0
            while index + 1 < parts.count, let hop = owner.property(named: parts[index]), hop.isToOne, let destination = hop.destination {
                hops.append(hop)
                owner = destination
                index += 1
            }
            guard let property = owner.property(named: parts[index]), property.isToMany, let destination = property.destination else {
                let toMany = owner.properties.filter(\.isToMany).map(\.name).joined(separator: ", ")
                throw QueryError(.unsupported, "\(quantifier.rawValue) \(key) on \(entity.name): a quantifier needs a path to a to-many relationship (\(owner.name) has \(toMany.isEmpty ? "none" : toMany)), through to-one relationships if need be, then a key of its members.", key: key, entity: entity.name)
            }
            let relationship = parts[...index].joined(separator: ".")
            var memberNode = try strip(relationship, from: inner, entity: entity)
            // A path through a second to-many relationship (`friendOf.pets.name`) quantifies
            // again over its members: ANY of ANY, ALL of ALL, NONE of ANY.
            if index + 1 < parts.count {
                let rest = parts[(index + 1)...].joined(separator: ".")
                if crossesToMany(rest, in: destination) {
                    memberNode = .quantified(quantifier == .all ? .all : .any, rest, memberNode)
                }
            }
            let query = try members(of: property, memberNode, outer: false)
            if !hops.isEmpty { chains[hops.map(\.name).joined(separator: ".")] = hops }
            uses.append((hops, property, query))
            return .quantified(quantifier, hops: hops, property, query)
        }

        /// `SUBQUERY(relationship, $m, condition).@function.member` as a path whose value the
        /// collection computes.
        func subquery(_ relationship: String, _ condition: Condition.Node, _ function: CollectionFunction, _ member: String?) throws(QueryError) -> ResolvedPath {
            let written = "SUBQUERY(\(relationship), …).@\(function.rawValue)\(member.map { "." + $0 } ?? "")"
            guard let property = entity.property(named: relationship), property.isToMany else {
                throw QueryError(.unsupported, "\(written) on \(entity.name): SUBQUERY takes one of \(entity.name)'s to-many relationships (\(entity.properties.filter(\.isToMany).map(\.name).joined(separator: ", "))).", key: relationship, entity: entity.name)
            }
            let filter = try members(of: property, condition, outer: true)
            return try collectionPath(written, property, function, member, filter: filter, in: entity)
        }

        /// `$name` left without a value by `substituting(_:)`.
        func unboundVariable(_ name: String) -> QueryError {
            QueryError(.unsupported, "$\(name) in a condition on \(entity.name) has no value: give the condition its variables with .substituting([\"\(name)\": …]) before using it.", entity: entity.name)
        }

        func resolve(_ node: Condition.Node) throws(QueryError) -> Node {
            switch node {
            case .constant(let value): return .constant(value)
            case .and, .or:
                var operands: [Node] = []
                for operand in node.chain() { operands.append(try resolve(operand)) }
                if case .and = node { return balanced(operands[...]) { .and($0, $1) } }
                return balanced(operands[...]) { .or($0, $1) }
            case .not(let a): return .not(try resolve(a))
            case .text(let key, let op, let pattern, let options):
                return try resolveComparison(.key(key), .text(op), .constant(.value(.text(pattern), .string)), options)
            case .oneOf(let key, let operands):
                return try resolveComparison(.key(key), .isIn, .list(operands), [])
            case .between(let key, let low, let high):
                return try resolveComparison(.key(key), .between, .list([low, high]), [])
            case .compare(let key, let op, let operand):
                let right: Condition.Expression = if case .key(let other) = operand { .key(other) } else { .constant(operand) }
                return try resolveComparison(.key(key), .compare(op), right, [])
            case .expression(let left, let op, let right, let options):
                return try resolveComparison(left, op, right, options)
            case .invalid(let error):
                throw error
            case .quantified(let quantifier, let key, let inner):
                return try quantify(quantifier, key, inner)
            }
        }

        /// `left op right`, checked against the model: the one place where every comparison,
        /// whichever way it was written, gets its meaning.
        func resolveComparison(_ left: Condition.Expression, _ op: Condition.PredicateOperator, _ right: Condition.Expression,
                               _ options: MatchOptions) throws(QueryError) -> Node {
            // For messages only: made when one is thrown.
            var spelled: String { op.spelling + options.formatSuffix }
            for side in [left, right] {
                if let name = side.firstVariable { throw unboundVariable(name) }
            }
            // A key through a to-many relationship asks about members: `%@ IN pets`, `'Rex' IN
            // pets.name` and `pets CONTAINS %@` ask whether one of them is the value, and any other
            // comparison (`pets.name BEGINSWITH 'R'`) whether one of them matches (ANY).
            var toMany: [String] = []
            if case .key(let key) = left, crossesToMany(key, in: entity) { toMany.append(key) }
            if case .key(let key) = right, crossesToMany(key, in: entity) { toMany.append(key) }
            if let key = toMany.first {
                guard toMany.count == 1 else {
                    throw QueryError(.unsupported, "\(entity.name): \(toMany[0]) \(spelled) \(toMany[1]) compares two to-many key paths; compare one of them with a quantifier (ANY, ALL, NONE) against values.", key: key, entity: entity.name)
                }
                for side in [left, right] where entity.property(named: key)?.isToMany == true {
                    var values: [Condition.Operand] = []
                    if case .constant(let operand) = side { values = [operand] } else if case .list(let operands) = side { values = operands }
                    for case .value(let value, _) in values {
                        if value.isNull && values.count == 1 {
                            throw QueryError(.unsupported, "\(entity.name).\(key) \(spelled) nil: a to-many relationship is never nil. To ask whether it is empty, compare \(key).@count with 0.", key: key, entity: entity.name)
                        }
                        throw QueryError(.unsupported, "\(entity.name).\(key) \(spelled) a value: a to-many relationship holds objects, not values. Compare a key of its members (ANY \(key).name == 'Rex'), or ask for an object with CONTAINS.", key: key, entity: entity.name)
                    }
                }
                if case .key(key) = left {
                    if case .text(.contains) = op { return try quantify(.any, key, .expression(left, .compare(.equal), right, options)) }
                    return try quantify(.any, key, .expression(left, op, right, options))
                }
                switch op {
                case .isIn: return try quantify(.any, key, .expression(right, .compare(.equal), left, options))
                case .compare(let comparison): return try quantify(.any, key, .expression(right, .compare(comparison.flipped), left, options))
                default:
                    throw QueryError(.unsupported, "\(entity.name): \(spelled) needs the to-many key path '\(key)' on its left.", key: key, entity: entity.name)
                }
            }

            var names: [String] = []
            let lhs = try side(left, &names)
            let rhs = try side(right, &names)
            return try CompiledQuery.comparison(lhs, op, rhs, options, names: names, in: entity)
        }

        /// One side of a comparison: keys resolved and noted, arithmetic on constants computed.
        func side(_ expression: Condition.Expression, _ names: inout [String]) throws(QueryError) -> Side {
            switch expression {
            case .key(let key), .constant(.key(let key)):
                let path = try resolvePath(key, in: entity)
                note(path)
                names.append(key)
                return .path(path)
            case .constant(.value(let value, let kind)): return .value(value, kind)
            case .constant(.object(let id)): return .object(id)
            case .list(let items): return .list(items)
            case .evaluatedObject:
                names.append("SELF")
                return .identity
            case .variable, .listWithVariables:
                throw unboundVariable(expression.firstVariable ?? "?")
            case .now:
                names.append("now()")
                return .value(.double(now.value), .date)
            case .outer(let key):
                guard let outerEntity else {
                    throw QueryError(.unsupported, "'\(key)' reads the object outside a SUBQUERY from inside a quantifier (ANY, ALL, NONE) on \(entity.name): write the quantifier as a nested SUBQUERY(…).@count > 0 instead.", key: key, entity: entity.name)
                }
                let path = try resolvePath(key, in: outerEntity)
                guard let kind = path.kind else {
                    throw QueryError(.unsupported, "'\(key)' in a SUBQUERY's condition is \(outerEntity.name)'s relationship: a SUBQUERY reads the outer object's attributes (write $m.key for the member's keys).", key: key, entity: outerEntity.name)
                }
                outerPaths.append(path)
                names.append(key)
                return .computed(.outer(path), kind)
            case .subquery(let relationship, let condition, let function, let member):
                let path = try subquery(relationship, condition, function, member)
                note(path)
                names.append(path.key)
                return .path(path)
            case .arithmetic(let left, let op, let right):
                let a = try side(left, &names)
                let b = try side(right, &names)
                let kind = try arithmeticKind(a, op, b)
                if case .value(let x, _) = a, case .value(let y, _) = b { return .value(op.apply(x, y), kind) }
                return .computed(.arithmetic(term(a), op, term(b)), kind)
            }
        }

        /// The kind of `a op b`: numbers give a double; a date plus or minus a number gives a
        /// date, and a date minus a date the seconds between them.
        func arithmeticKind(_ a: Side, _ op: Condition.ArithmeticOperator, _ b: Side) throws(QueryError) -> AttributeKind {
            func kind(_ side: Side) throws(QueryError) -> AttributeKind {
                if case .value(let value, _) = side, value.isNull {
                    throw QueryError(.unsupported, "\(entity.name): nil \(op.rawValue) … is always nil, so the comparison never matches; compare with == nil instead.", entity: entity.name)
                }
                guard let kind = side.kind, kind.isNumeric || kind == .date else {
                    throw QueryError(.typeMismatch, "\(entity.name): \(describe(side)) is not a number or a date, so it cannot take part in \(op.rawValue).", entity: entity.name)
                }
                return kind
            }
            switch (try kind(a), op, try kind(b)) {
            case (.date, .add, let other) where other.isNumeric, (let other, .add, .date) where other.isNumeric,
                 (.date, .subtract, let other) where other.isNumeric:
                return .date
            case (.date, .subtract, .date):
                return .double
            case (let x, _, let y) where x.isNumeric && y.isNumeric:
                return .double
            default:
                throw QueryError(.typeMismatch, "\(entity.name): \(describe(a)) \(op.rawValue) \(describe(b)): dates take only + and - with a number of seconds, and - with another date.", entity: entity.name)
            }
        }
    }

    /// One side of a comparison, resolved against the entity.
    enum Side {
        case path(ResolvedPath)
        case value(Value, AttributeKind?)
        case object(ObjectID)
        case list([Condition.Operand])
        case identity
        /// Arithmetic, or a key of the object outside a SUBQUERY: a value of this kind.
        case computed(Term, AttributeKind)

        var kind: AttributeKind? {
            switch self {
            case .path(let path): path.kind
            case .value(_, let kind): kind
            case .computed(_, let kind): kind
            default: nil
            }
        }

        var isText: Bool {
            switch self {
            case .path, .computed: kind == .string || kind == .url
            case .value(let value, let kind): kind == .string || kind == .url || (kind == nil && value.stringValue != nil)
            default: false
            }
        }

        var isConstant: Bool {
            switch self {
            case .value, .object, .list: true
            case .path, .identity, .computed: false
            }
        }
    }

    /// Whether `key` goes through one of the entity's to-many relationships (`pets.name`,
    /// `friend.pets`, or `pets` itself), which makes a comparison a question about members.
    /// `pets.@count` and `pets.@sum.age` read a number and do not.
    static func crossesToMany(_ key: String, in entity: ResolvedEntity) -> Bool {
        // Most keys name one of the entity's own properties: no splitting for those.
        if !key.utf8.contains(UInt8(ascii: ".")) { return entity.property(named: key)?.isToMany == true }
        let parts = key.split(separator: ".", omittingEmptySubsequences: false)
        var current = entity
        for (index, part) in parts.enumerated() {
            guard let property = current.property(named: String(part)) else { return false }
            if property.isToMany { return !(index + 1 < parts.count && parts[index + 1].hasPrefix("@")) }
            guard property.isToOne, let destination = property.destination else { return false }
            current = destination
        }
        return false
    }

    /// A path whose value a collection function computes over `property`'s members, checked:
    /// `@count` takes no member key; `@sum` and `@avg` a number; `@min` and `@max` an
    /// attribute whose stored order is its order (not a decimal, not data).
    static func collectionPath(_ written: String, _ property: Property, _ function: CollectionFunction, _ memberKey: String?,
                               filter: CompiledQuery?, in entity: ResolvedEntity) throws(QueryError) -> ResolvedPath {
        let destination = property.destination!
        func refuse(_ why: String) -> QueryError {
            QueryError(.unsupported, "'\(written)' on \(entity.name): \(why)", key: written, entity: entity.name)
        }
        var member: Property?
        switch (function, memberKey) {
        case (.count, nil):
            break
        case (.count, let key?):
            throw refuse("@count counts the members and takes no key after it (found '\(key)').")
        case (_, nil):
            throw refuse("@\(function.rawValue) needs a key of \(destination.name) after it, as in \(property.name).@\(function.rawValue).age.")
        case (_, let key?):
            guard let found = destination.property(named: key), let kind = found.attributeKind, found.isStored else {
                let attributes = destination.properties.filter { $0.attributeKind != nil }.map(\.name).joined(separator: ", ")
                throw QueryError(.unknownKey, "'\(written)' on \(entity.name): @\(function.rawValue) takes an attribute of \(destination.name) (\(attributes)), not '\(key)'.", key: written, entity: entity.name)
            }
            switch function {
            case .sum, .avg:
                guard kind.isNumeric else { throw refuse("@\(function.rawValue) adds numbers; \(destination.name).\(key) is a \(kind.rawValue) attribute.") }
            default:
                guard kind != .decimal && kind != .data && kind != .uuid else {
                    throw refuse("\(kind.rawValue) values are not stored in their order, so @\(function.rawValue) of \(destination.name).\(key) has no SQL equivalent.")
                }
            }
            member = found
        }
        return ResolvedPath(key: written, hops: [], leaf: property,
                            collection: Collection(function: function, member: member, filter: filter))
    }

    /// `lhs op rhs` once both sides are resolved.
    static func comparison(_ lhs: Side, _ op: Condition.PredicateOperator, _ rhs: Side, _ options: MatchOptions,
                           names: [String], in entity: ResolvedEntity) throws(QueryError) -> Node {
        // For messages only, as written (before a flip below): made when one is thrown.
        let written = op
        var spelled: String { written.spelling + options.formatSuffix }
        var lhs = lhs
        var rhs = rhs
        var op = op
        // A value on the left of a comparison flips it: `18 < age` is `age > 18`.
        if case .compare(let comparison) = op, lhs.isConstant, !rhs.isConstant {
            swap(&lhs, &rhs)
            op = .compare(comparison.flipped)
        }
        let key = names.first ?? "a constant"
        func mismatch(_ what: String) -> QueryError {
            QueryError(.typeMismatch, "\(entity.name): \(describe(lhs)) \(spelled) \(what) cannot be compared.", key: names.first, entity: entity.name)
        }
        func unsupported(_ why: String) -> QueryError {
            QueryError(.unsupported, "\(entity.name).\(key) \(spelled): \(why)", key: names.first, entity: entity.name)
        }
        // Options fold text and change nothing else.
        let textOptions = lhs.isText || rhs.isText ? options : []

        switch op {
        case .compare(let comparison):
            switch (lhs, rhs) {
            case (.list, _), (_, .list):
                throw unsupported("lists go only after IN and BETWEEN.")
            case (.path, .value(let value, let kind)), (.computed, .value(let value, let kind)):
                if value.isNull && comparison.isOrdering { throw unsupported("nil never matches \(comparison.rawValue): use == nil or != nil.") }
                if let kind {
                    guard let leftKind = lhs.kind, leftKind.isComparable(with: kind) else { throw mismatch("a \(kind.rawValue) value") }
                    if comparison.isOrdering && leftKind == .decimal { throw unsupported("decimals are stored as text and support only == and !=.") }
                }
                return .compare(term(lhs), comparison, .value(value), textOptions)
            case (.computed, .path), (.path, .computed), (.computed, .computed):
                guard let a = lhs.kind, let b = rhs.kind, a.isComparable(with: b) else { throw mismatch(describe(rhs)) }
                if comparison.isOrdering && a == .decimal { throw unsupported("decimals are stored as text and support only == and !=.") }
                return .compare(term(lhs), comparison, term(rhs), textOptions)
            case (.computed, _), (_, .computed):
                throw mismatch(describe(rhs))
            case (.path(let path), .object(let id)):
                guard path.leaf.isToOne, let destination = path.leaf.destination, destination.rootDescription === id.rootEntity else {
                    throw mismatch("the object \(id)")
                }
                guard !comparison.isOrdering else { throw unsupported("relationships support only == and !=.") }
                return .compare(.path(path), comparison, .value(.integer(id.primaryKey)), [])
            case (.path(let path), .path(let other)):
                switch (path.kind, other.kind) {
                case (let a?, let b?) where a.isComparable(with: b):
                    if comparison.isOrdering && a == .decimal { throw mismatch("the key '\(other.key)' with \(comparison.rawValue)") }
                case (nil, nil) where !comparison.isOrdering && path.leaf.destination?.rootDescription === other.leaf.destination?.rootDescription:
                    break
                default:
                    throw mismatch("the key '\(other.key)' (\(describe(other.leaf)))")
                }
                return .compare(.path(path), comparison, .path(other), textOptions)
            case (.path(let path), .identity), (.identity, .path(let path)):
                guard path.leaf.isToOne, path.leaf.destination?.rootDescription === entity.rootDescription, !comparison.isOrdering else {
                    throw mismatch("SELF")
                }
                return .compare(.path(path), comparison, .identity, [])
            case (.identity, .object(let id)):
                guard id.rootEntity === entity.rootDescription else { throw mismatch("the object \(id)") }
                guard !comparison.isOrdering else { throw unsupported("objects compare only with == and !=.") }
                return .compare(.identity, comparison, .value(.integer(id.primaryKey)), [])
            case (.identity, .value(.null, _)):
                throw unsupported("an object is never nil, so this is always \(comparison == .notEqual). To ask for an empty to-many relationship, compare its @count with 0.")
            case (.identity, .identity):
                guard !comparison.isOrdering else { throw unsupported("objects compare only with == and !=.") }
                return .constant(comparison == .equal)
            case (.identity, .value(_, let kind)):
                throw mismatch("a \(kind?.rawValue ?? "") value")
            case (.value, _), (.object, _):
                return .constant(try constantOutcome(lhs, op, rhs, textOptions, unsupported: unsupported, mismatch: mismatch))
            }
        case .isIn:
            switch (lhs, rhs) {
            case (.path, .list(let items)), (.computed, .list(let items)):
                var list: [Value] = []
                for item in items { list.append(try value(of: item, comparedWith: lhs, key: key, op: .equal, in: entity)) }
                return .oneOf(term(lhs), list, textOptions)
            case (.identity, .list(let items)):
                var list: [Value] = []
                for item in items {
                    switch item {
                    case .object(let id) where id.rootEntity === entity.rootDescription: list.append(.integer(id.primaryKey))
                    case .value(.null, _): list.append(.null)
                    default: throw mismatch("a list that holds \(item)")
                    }
                }
                return .oneOf(.identity, list, [])
            // A string on the right of IN: `name IN 'Wilhelmina'` is a substring test.
            case (.path, .value(.text, _)) where lhs.isText, (.computed, .value(.text, _)) where lhs.isText,
                 (.path, .path) where lhs.isText && rhs.isText, (.computed, .path) where lhs.isText && rhs.isText,
                 (.path, .computed) where lhs.isText && rhs.isText, (.computed, .computed) where lhs.isText && rhs.isText,
                 (.value(.text, _), .path) where rhs.isText, (.value(.text, _), .computed) where rhs.isText:
                return .text(term(rhs), .contains, term(lhs), options)
            case (.value, .list), (.object, .list), (.value, .value):
                return .constant(try constantOutcome(lhs, op, rhs, textOptions, unsupported: unsupported, mismatch: mismatch))
            default:
                throw unsupported("IN takes a list on its right ({a, b} or %@ with an array), or a string to look for the left side in.")
            }
        case .between:
            switch (lhs, rhs) {
            case (.path, .list(let items)) where items.count == 2, (.computed, .list(let items)) where items.count == 2:
                let low = try value(of: items[0], comparedWith: lhs, key: key, op: .lessOrEqual, in: entity)
                let high = try value(of: items[1], comparedWith: lhs, key: key, op: .lessOrEqual, in: entity)
                // As for `<` and `>`: a bound of nil (or NaN, which is nil) orders nothing, and
                // SQL's `BETWEEN NULL AND x` would match half of what it says under a NOT.
                if low.isNull || high.isNull { throw unsupported("nil never matches between: its bounds must be values (NaN is nil).") }
                return .between(term(lhs), low, high, textOptions)
            case (.value, .list(let items)) where items.count == 2:
                return .constant(try constantOutcome(lhs, op, rhs, textOptions, unsupported: unsupported, mismatch: mismatch))
            default:
                throw unsupported("BETWEEN takes a key on its left and a list of two values, {low, high}, on its right.")
            }
        case .text(let textOperator):
            guard lhs.isText, rhs.isText else {
                let notText = lhs.isText ? rhs : lhs
                if case .path(let path) = notText {
                    throw QueryError(.typeMismatch, "\(entity.name).\(path.key) \(textOperator.rawValue): \(describe(path.leaf)) is not text; string operators apply to String attributes.", key: path.key, entity: entity.name)
                }
                throw mismatch(describe(notText) + " (string operators take text on both sides)")
            }
            if case .value(.text(let pattern), _) = rhs, !TextMatch.validate(textOperator, options, pattern) {
                throw unsupported("the regular expression \(String(reflecting: pattern)) does not compile.")
            }
            if case .value = lhs, case .value = rhs {
                return .constant(try constantOutcome(lhs, op, rhs, options, unsupported: unsupported, mismatch: mismatch))
            }
            if case .path(let path) = rhs, path.collection?.filter != nil {
                throw unsupported("a SUBQUERY's value is not a pattern; compare it with ==, <, … instead.")
            }
            return .text(term(lhs), textOperator, term(rhs), options)
        }
    }

    static func term(_ side: Side) -> Term {
        switch side {
        case .path(let path): .path(path)
        case .value(let value, _): .value(value)
        case .object(let id): .value(.integer(id.primaryKey))
        case .identity: .identity
        case .computed(let term, _): term
        case .list: preconditionFailure("unreachable: lists are not terms")
        }
    }

    /// Which values compare with each other when no attribute says their kinds: numbers with
    /// numbers, texts with texts, bytes with bytes.
    static func valueClass(_ value: Value) -> Int {
        switch value {
        case .integer, .double: 0
        case .text: 1
        case .blob: 2
        case .null: 3
        }
    }

    /// A comparison of two constants (`%@ > %@`, `'a' IN {'a', 'b'}`), evaluated now, as Apple
    /// evaluates it. One that nil makes unknown throws, as `key > nil` does; objects compare
    /// by ID, with == and != and IN only.
    static func constantOutcome(_ lhs: Side, _ op: Condition.PredicateOperator, _ rhs: Side, _ options: MatchOptions,
                                        unsupported: (String) -> QueryError, mismatch: (String) -> QueryError) throws(QueryError) -> Bool {
        func fold(_ value: Value) -> Value { Self.fold(value, options) }
        /// Throws `.typeMismatch` for two values of kinds that do not compare (a string and a
        /// number, a date and a number), as a key and a value of them do, and as Apple's
        /// evaluation refuses: the store's order of kinds (numbers before text) means nothing.
        func checkKinds(_ a: Condition.Operand, _ b: Condition.Operand) throws(QueryError) {
            guard case .value(let x, let xKind) = a, case .value(let y, let yKind) = b, !x.isNull, !y.isNull else { return }
            let comparable = if let xKind, let yKind { xKind.isComparable(with: yKind) } else { Self.valueClass(x) == Self.valueClass(y) }
            if !comparable { throw mismatch(describe(rhs)) }
        }
        /// Whether two constants are the same: values by value (nil equals nil), objects by ID.
        func same(_ a: Condition.Operand, _ b: Condition.Operand) throws(QueryError) -> Bool {
            try checkKinds(a, b)
            switch (a, b) {
            case (.value(let x, _), .value(let y, _)): return Value.compare(fold(x), fold(y)) == 0
            case (.object(let x), .object(let y)): return x == y
            case (.object, .value(let y, _)) where y.isNull, (.value(let y, _), .object) where y.isNull: return false
            default: throw mismatch(describe(rhs))
            }
        }
        let left: Condition.Operand
        switch lhs {
        case .value(let value, let kind): left = .value(value, kind)
        case .object(let id): left = .object(id)
        default: preconditionFailure("unreachable: only constants are evaluated")
        }
        switch (op, rhs) {
        case (.compare(let comparison), .value(let right, let kind)):
            if comparison.isOrdering {
                guard case .value(let value, _) = left else { throw unsupported("objects compare only with == and !=.") }
                try checkKinds(left, .value(right, kind))
                guard let outcome = order(fold(value), fold(right), comparison) else { throw unsupported("nil never matches \(comparison.rawValue): use == nil or != nil.") }
                return outcome
            }
            return try same(left, .value(right, kind)) == (comparison == .equal)
        case (.compare(let comparison), .object(let id)):
            guard !comparison.isOrdering else { throw unsupported("objects compare only with == and !=.") }
            return try same(left, .object(id)) == (comparison == .equal)
        case (.isIn, .list(let items)):
            if case .value(let value, _) = left, value.isNull { throw unsupported("nil is in no list: compare with == nil instead.") }
            // Every item's kind, not only those before a match: the answer must not depend on
            // the order of the list.
            for item in items { try checkKinds(left, item) }
            for item in items where try same(left, item) {
                if case .value(let value, _) = item, value.isNull { continue }
                return true
            }
            return false
        case (.isIn, .value(.text(let text), _)):
            guard case .value(.text(let wanted), _) = left else { throw mismatch(describe(lhs)) }
            return TextMatch.evaluate(.contains, options, text, wanted)
        case (.between, .list(let items)):
            guard case .value(let value, _) = left, case .value(let low, _) = items[0], case .value(let high, _) = items[1] else {
                throw mismatch(describe(rhs))
            }
            try checkKinds(left, items[0])
            try checkKinds(left, items[1])
            guard let above = order(fold(value), fold(low), .greaterOrEqual), let below = order(fold(value), fold(high), .lessOrEqual) else {
                throw unsupported("nil is between nothing.")
            }
            return above && below
        case (.text(let textOperator), .value(.text(let pattern), _)):
            guard case .value(.text(let text), _) = left else { throw mismatch(describe(lhs)) }
            return TextMatch.evaluate(textOperator, options, text, pattern)
        default:
            throw mismatch(describe(rhs))
        }
    }

    static func describe(_ side: Side) -> String {
        switch side {
        case .path(let path): "'\(path.key)'"
        case .value(let value, let kind): kind.map { "the \($0.rawValue) \(value)" } ?? value.description
        case .object(let id): "the object \(id)"
        case .list(let items): "a list of \(items.count)"
        case .identity: "SELF"
        case .computed(.outer(let path), _): "'\(path.key)' (of the object outside the SUBQUERY)"
        case .computed(_, let kind): "a computed \(kind.rawValue)"
        }
    }

    /// The member condition of a quantifier over `relationship`: the same node with
    /// `relationship.` cut from its keys, and the relationship itself (`ANY pets == %@`) read as
    /// the member, `SELF`.
    static func strip(_ relationship: String, from node: Condition.Node, entity: ResolvedEntity) throws(QueryError) -> Condition.Node {
        let prefix = relationship + "."
        func key(_ key: String) throws(QueryError) -> String {
            guard key.hasPrefix(prefix), key.count > prefix.count else {
                throw QueryError(.unsupported, "In a quantified condition on \(entity.name), '\(key)' does not go through '\(relationship)': compare members' keys with values.", key: key, entity: entity.name)
            }
            return String(key.dropFirst(prefix.count))
        }
        func side(_ expression: Condition.Expression) throws(QueryError) -> Condition.Expression {
            switch expression {
            case .key(relationship), .constant(.key(relationship)): return .evaluatedObject
            case .key(let k), .constant(.key(let k)): return .key(try key(k))
            case .arithmetic(let left, let op, let right): return .arithmetic(try side(left), op, try side(right))
            case .constant, .list, .listWithVariables, .evaluatedObject, .variable, .now, .outer: return expression
            case .subquery:
                throw QueryError(.unsupported, "A SUBQUERY inside a quantified condition on \(entity.name) (through '\(relationship)'): write the quantifier as a SUBQUERY too, and nest the two.", key: relationship, entity: entity.name)
            }
        }
        switch node {
        case .compare(let k, let op, let operand):
            let right: Condition.Expression = if case .key(let other) = operand { .key(other) } else { .constant(operand) }
            switch (try side(.key(k)), try side(right)) {
            case (.key(let l), .key(let r)): return .compare(l, op, .key(r))
            case (.key(let l), .constant(let value)): return .compare(l, op, value)
            case (let l, let r): return .expression(l, .compare(op), r, [])
            }
        case .text(let k, let op, let pattern, let options):
            return .text(try key(k), op, pattern, options)
        case .oneOf(let k, let list):
            if k == relationship { return .expression(.evaluatedObject, .isIn, .list(list), []) }
            return .oneOf(try key(k), list)
        case .between(let k, let low, let high): return .between(try key(k), low, high)
        case .expression(let left, let op, let right, let options):
            return .expression(try side(left), op, try side(right), options)
        case .and, .or:
            var operands: [Condition.Node] = []
            for operand in node.chain() { operands.append(try strip(relationship, from: operand, entity: entity)) }
            if case .and = node { return balanced(operands[...]) { .and($0, $1) } }
            return balanced(operands[...]) { .or($0, $1) }
        case .not(let a): return .not(try strip(relationship, from: a, entity: entity))
        case .quantified(let quantifier, let k, let inner): return .quantified(quantifier, try key(k), try strip(relationship, from: inner, entity: entity))
        case .constant, .invalid: return node
        }
    }

    /// A constant operand checked against the side it is compared with.
    static func value(of operand: Condition.Operand, comparedWith side: Side, key: String,
                      op: ComparisonOperator, in entity: ResolvedEntity) throws(QueryError) -> Value {
        let mismatch = { (what: String) in
            let subject = if case .path(let path) = side { describe(path.leaf) } else { describe(side) }
            return QueryError(.typeMismatch, "\(entity.name).\(key): \(subject) cannot be compared with \(what).", key: key, entity: entity.name)
        }
        switch operand {
        case .value(let value, let kind):
            if let kind {
                guard let sideKind = side.kind, sideKind.isComparable(with: kind) else { throw mismatch("a \(kind.rawValue) value") }
                if op.isOrdering && sideKind == .decimal {
                    throw QueryError(.unsupported, "\(entity.name).\(key): decimals are stored as text and support only == and !=.", key: key, entity: entity.name)
                }
            }
            return value
        case .object(let id):
            guard case .path(let path) = side, path.collection == nil, path.leaf.isToOne, let destination = path.leaf.destination,
                  destination.rootDescription === id.rootEntity, !op.isOrdering else {
                throw mismatch("the object \(id)")
            }
            return .integer(id.primaryKey)
        case .key(let other):
            throw QueryError(.unsupported, "\(entity.name).\(key): IN and BETWEEN take values, not the key '\(other)'.", key: key, entity: entity.name)
        }
    }

    static func describe(_ property: Property) -> String {
        if let kind = property.attributeKind { return "the \(kind.rawValue) attribute '\(property.name)'" }
        return "the relationship '\(property.name)' to \(property.destination?.name ?? "?")"
    }
}
