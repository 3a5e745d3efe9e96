import Foundation
import _ContextStackCore

extension CompiledQuery {
    // MARK: - In memory

    /// Resolves an object's row by ID, as the evaluating context sees it (nil: no such object).
    package typealias RowResolver = (ObjectID) throws -> ObjectRow?
    /// The members of an object's to-many relationship, as the evaluating context sees them.
    package typealias MemberResolver = (ObjectID, Property) throws -> [ObjectID]

    /// The value at `path` for a row, following to-one hops through `resolve` (not for a
    /// collection, which `Subject.value(_:)` computes).
    static func value(at path: ResolvedPath, in values: ContiguousArray<Value>, resolve: RowResolver) throws -> Value {
        var current = values
        for hop in path.hops {
            guard case .integer(let key) = current[hop.slot], let destination = hop.destination,
                  let row = try resolve(ObjectID(rootEntity: destination.rootDescription, primaryKey: key))
            else { return .null }
            current = row.values
        }
        return current[path.leaf.slot]
    }

    /// Whether a row matches, with SQL's three-valued logic (`nil` is unknown: not a match).
    package func matches(_ id: ObjectID, _ values: ContiguousArray<Value>, resolve: RowResolver, members: MemberResolver) throws -> Bool {
        guard let node else { return true }
        return try withoutActuallyEscaping(resolve) { resolve in
            try withoutActuallyEscaping(members) { members in
                try Self.evaluate(node, Subject(id: id, values: values, resolve: resolve, members: members)) == true
            }
        }
    }

    /// What evaluating a node needs to know about the row at hand.
    struct Subject {
        let id: ObjectID
        let values: ContiguousArray<Value>
        let resolve: RowResolver
        let members: MemberResolver
        /// In a SUBQUERY's condition, the object outside it.
        var outer: Outer? = nil

        /// The row a SUBQUERY's condition reads its outer keys from.
        final class Outer {
            let subject: Subject
            init(_ subject: Subject) { self.subject = subject }
        }

        func value(_ path: ResolvedPath) throws -> Value {
            guard let collection = path.collection else { return try CompiledQuery.value(at: path, in: values, resolve: resolve) }
            let all = try members(id, path.leaf)
            if collection.filter == nil && collection.member == nil { return .integer(Int64(all.count)) }
            var count = 0
            var found: [Value] = []
            let outer = collection.filter == nil ? nil : Outer(self)
            for member in all {
                guard let row = try resolve(member) else { continue }
                if let node = collection.filter?.node {
                    let subject = Subject(id: member, values: row.values, resolve: resolve, members: members, outer: outer)
                    guard try CompiledQuery.evaluate(node, subject) == true else { continue }
                }
                count += 1
                if let attribute = collection.member { found.append(row.values[attribute.slot]) }
            }
            return try collection.evaluate(count: count, values: found, key: path.key)
        }

        /// The object at the end of `hops` (this one for none); nil where a hop is nil.
        func object(through hops: [Property]) throws -> ObjectID? {
            var id = self.id
            var current = values
            for hop in hops {
                guard case .integer(let key) = current[hop.slot], let destination = hop.destination else { return nil }
                id = ObjectID(rootEntity: destination.rootDescription, primaryKey: key)
                guard let row = try resolve(id) else { return nil }
                current = row.values
            }
            return id
        }

        /// A term's value, with its text folded as `options` say.
        func value(_ term: Term, folding options: MatchOptions = []) throws -> Value {
            let value: Value
            switch term {
            case .value(let constant): value = constant
            case .path(let path): value = try self.value(path)
            case .identity: value = .integer(id.primaryKey)
            case .outer(let path):
                guard let outer else { preconditionFailure("unreachable: only a SUBQUERY's condition reads the outer object") }
                value = try outer.subject.value(path)
            case .arithmetic(let a, let op, let b): value = op.apply(try self.value(a), try self.value(b))
            }
            return CompiledQuery.fold(value, options)
        }
    }

    static func evaluate(_ node: Node, _ row: Subject) throws -> Bool? {
        let resolve = row.resolve
        switch node {
        case .constant(let value): return value
        case .and(let a, let b):
            let left = try evaluate(a, row)
            if left == false { return false }
            let right = try evaluate(b, row)
            if right == false { return false }
            return left == nil || right == nil ? nil : true
        case .or(let a, let b):
            let left = try evaluate(a, row)
            if left == true { return true }
            let right = try evaluate(b, row)
            if right == true { return true }
            return left == nil || right == nil ? nil : false
        case .not(let a):
            return try evaluate(a, row).map(!)
        case .quantified(let quantifier, let hops, let property, let inner):
            var someMatch = false
            var allMatch = true
            // Through to-one hops, the owner is the object they lead to; none has no members.
            let owner = try row.object(through: hops)
            for member in try owner.map({ try row.members($0, property) }) ?? [] {
                guard let memberRow = try resolve(member) else { continue }
                let outcome = try inner.node.map { try evaluate($0, Subject(id: member, values: memberRow.values, resolve: resolve, members: row.members)) } ?? true
                if outcome == true { someMatch = true } else { allMatch = false }
            }
            switch quantifier {
            case .any: return someMatch
            case .all: return allMatch
            case .none: return !someMatch
            }
        case .text(let value, let op, let pattern, let options):
            guard case .text(let wanted) = try row.value(pattern) else { return nil }
            return TextMatch.evaluate(op, options, try row.value(value), wanted)
        case .oneOf(let term, let list, let options):
            // As SQLite's IN: NULL is unknown; no match is unknown when the list holds NULL.
            let left = try row.value(term, folding: options)
            if list.isEmpty { return false }
            if left.isNull { return nil }
            if list.contains(where: { !$0.isNull && Value.compare(left, Self.fold($0, options)) == 0 }) { return true }
            return list.contains(where: \.isNull) ? nil : false
        case .between(let term, let low, let high, let options):
            let left = try row.value(term, folding: options)
            return and3(order(left, Self.fold(low, options), .greaterOrEqual), order(left, Self.fold(high, options), .lessOrEqual))
        case .compare(let left, let op, let right, let options):
            let a = try row.value(left, folding: options)
            let b = try row.value(right, folding: options)
            switch op {
            case .equal: return Value.compare(a, b) == 0
            case .notEqual: return Value.compare(a, b) != 0
            default: return order(a, b, op)
            }
        }
    }

    /// A value with its text folded as `options` say.
    static func fold(_ value: Value, _ options: MatchOptions) -> Value {
        if !options.isEmpty, case .text(let text) = value { return .text(TextMatch.fold(text, options)) }
        return value
    }

    /// An ordering comparison with SQL's NULL rule: unknown when either side is NULL.
    static func order(_ left: Value, _ right: Value, _ op: ComparisonOperator) -> Bool? {
        if left.isNull || right.isNull { return nil }
        let order = Value.compare(left, right)
        switch op {
        case .less: return order < 0
        case .lessOrEqual: return order <= 0
        case .greater: return order > 0
        case .greaterOrEqual: return order >= 0
        case .equal: return order == 0
        case .notEqual: return order != 0
        }
    }

    /// SQL's AND on unknowns.
    static func and3(_ a: Bool?, _ b: Bool?) -> Bool? {
        if a == false || b == false { return false }
        return a == nil || b == nil ? nil : true
    }

    /// Whether row `a` sorts before row `b`: the order terms, then primary key.
    package func sortsBefore(_ a: (id: ObjectID, values: ContiguousArray<Value>), _ b: (id: ObjectID, values: ContiguousArray<Value>),
                     resolve: RowResolver) throws -> Bool {
        for term in order {
            let order = Value.compare(try Self.value(at: term.path, in: a.values, resolve: resolve),
                                      try Self.value(at: term.path, in: b.values, resolve: resolve))
            if order != 0 { return term.ascending ? order < 0 : order > 0 }
        }
        return a.id.primaryKey < b.id.primaryKey
    }
}
