import _ContextStackCore

/// Reusing the SQL text of a query whose condition has the shape of an earlier one.
///
/// An app asks the same questions with other values: `%"category" == n` for every `n`, a
/// prefix typed by a user, a key per imported row. Writing the SQL again for each is a fifth of
/// a small query's instructions (dozens of small strings appended), while its text depends
/// only on the condition's *shape*: which keys, operators and options, in which tree. So the
/// text of a stored window (`RowReader.storedWindow`) is kept per entity under the shape,
/// and a query of a known shape only collects its arguments, in the order the writer binds
/// them.
///
/// The text depends on a few values as well, and each is part of the shape: a comparison with
/// `nil` is `IS NULL` and binds nothing, an `IN` list has one placeholder per member, a
/// `BEGINSWITH` range has an upper bound unless the prefix has no successor, a `.constant`
/// is a literal, and a window has a `LIMIT` only when it is limited or offset. Queries the
/// shape does not describe — quantifiers, `SUBQUERY`, conditions read from an outer query —
/// are written afresh every time. In debug builds every reuse is checked against a fresh write
/// (the same text, the same arguments bit for bit), so the whole test suite, the generated
/// predicates of the differential tests among it, checks the shapes.
extension CompiledQuery {
    /// What the text of a query's stored window depends on, as a list of numbers: the dialect,
    /// the options of the window, then the condition's and the order's tree with each key as
    /// its properties' identities and each constant as the class of value the text depends on.
    struct Shape: Hashable, Sendable {
        fileprivate var tokens: [Int] = []
    }

    /// The most shapes an entity keeps texts for; past it, it forgets them all and starts again
    /// (an app asks a bounded number of kinds of questions, so this only bounds a pathological
    /// one that builds conditions without end).
    static let maximumShapes = 256

    /// The SQL `write` gives for this query's window of whole rows (`offset`, `limit`), with
    /// the text of an earlier query of the same shape when there is one, and its own arguments.
    func windowSQL(offset: Int, limit: Int?, byKey: Bool = true, write: () -> SQL) -> SQL {
        guard let shape = windowShape(offset: offset, limit: limit, byKey: byKey) else { return write() }
        if let text = entity.windowTexts.withLock({ $0[shape] }) {
            let arguments = windowArguments(offset: offset, limit: limit)
            assert(writesSameWindow(text, arguments, as: write()),
                   "CompiledQuery.Shape left out something the SQL of \(entity.name)'s query depends on; add it to `describe`.")
            return SQL(text: text, arguments: arguments)
        }
        let sql = write()
        entity.windowTexts.withLock { texts in
            if texts.count >= Self.maximumShapes { texts.removeAll() }
            texts[shape] = sql.text
        }
        return sql
    }

    /// The shape of this query's window of whole rows, or `nil` for a query whose text is
    /// always written afresh (see above).
    private func windowShape(offset: Int, limit: Int?, byKey: Bool) -> Shape? {
        guard aliasPrefix.isEmpty, outerPaths.isEmpty else { return nil }
        var shape = Shape()
        shape.tokens.reserveCapacity(16)
        shape.tokens.append(Self.token(ObjectIdentifier(type(of: dialect))))
        shape.tokens.append((includesSubEntities ? 1 : 0) | (limit != nil ? 2 : 0) | (offset > 0 ? 4 : 0) | (byKey ? 0 : 8))
        if let node, !Self.describe(node, into: &shape.tokens) { return nil }
        shape.tokens.append(-1)
        for term in order {
            guard Self.describe(term.path, into: &shape.tokens) else { return nil }
            shape.tokens.append(term.ascending ? 1 : 0)
        }
        return shape
    }

    /// The values `RowReader.storedWindow` binds for this query, in order, without its text.
    /// Only for a query that has a `windowShape`.
    private func windowArguments(offset: Int, limit: Int?) -> [Value] {
        var arguments: [Value] = []
        // Most conditions bind a few values: growing the array from empty reallocated it at
        // the second.
        arguments.reserveCapacity(4)
        if let node { collectArguments(node, positive: true, into: &arguments) }
        if limit != nil || offset > 0 { _ = dialect.window(limit: limit, offset: offset, arguments: &arguments) }
        return arguments
    }

    /// Whether `text` and `arguments` are exactly what writing the window afresh gives: what a
    /// debug build asserts on every reuse.
    private func writesSameWindow(_ text: String, _ arguments: [Value], as fresh: SQL) -> Bool {
        text == fresh.text && arguments.count == fresh.arguments.count
            && zip(arguments, fresh.arguments).allSatisfy { $0.isIdentical(to: $1) }
    }

    // MARK: - The shape

    private static func token(_ identifier: ObjectIdentifier) -> Int {
        Int(bitPattern: UInt(bitPattern: identifier))
    }

    /// Appends the tokens of `node`; `false` for a node whose text is always written afresh.
    private static func describe(_ node: Node, into tokens: inout [Int]) -> Bool {
        switch node {
        case .constant(let value):
            tokens.append(value ? 1 : 2)
            return true
        case .and(let a, let b):
            tokens.append(3)
            return describe(a, into: &tokens) && describe(b, into: &tokens)
        case .or(let a, let b):
            tokens.append(4)
            return describe(a, into: &tokens) && describe(b, into: &tokens)
        case .not(let a):
            tokens.append(5)
            return describe(a, into: &tokens)
        case .quantified:
            return false
        case .compare(let left, let op, let right, let options):
            tokens.append(6)
            tokens.append(Int(options.rawValue))
            tokens.append(ComparisonOperator.allCases.firstIndex(of: op)!)
            return describe(left, into: &tokens) && describe(right, into: &tokens)
        case .text(let value, let op, let pattern, let options):
            tokens.append(7)
            tokens.append(Int(options.rawValue))
            tokens.append(TextMatch.code(of: op))
            if case .value(.text(let constant)) = pattern {
                // A prefix range has an upper bound unless no text follows every text that
                // begins with the prefix (`TextMatch.prefixSuccessor`).
                tokens.append(constant.unicodeScalars.contains { $0.value < 0x10FFFF } ? -2 : -3)
            } else if !describe(pattern, into: &tokens) {
                return false
            }
            return describe(value, into: &tokens)
        case .oneOf(let left, let list, let options):
            tokens.append(8)
            tokens.append(Int(options.rawValue))
            tokens.append(list.count)
            return describe(left, into: &tokens)
        case .between(let left, _, _, let options):
            tokens.append(9)
            tokens.append(Int(options.rawValue))
            return describe(left, into: &tokens)
        }
    }

    private static func describe(_ term: Term, into tokens: inout [Int]) -> Bool {
        switch term {
        case .value(let value):
            // Compared with nil, a key is `IS NULL`; any other value is a placeholder.
            tokens.append(value.isNull ? -4 : -5)
            return true
        case .path(let path):
            return describe(path, into: &tokens)
        case .identity:
            tokens.append(-6)
            return true
        case .arithmetic(let a, let op, let b):
            tokens.append(-7)
            tokens.append(Condition.ArithmeticOperator.allCases.firstIndex(of: op)!)
            return describe(a, into: &tokens) && describe(b, into: &tokens)
        case .outer:
            return false
        }
    }

    private static func describe(_ path: ResolvedPath, into tokens: inout [Int]) -> Bool {
        tokens.append(-8 - path.hops.count)
        for hop in path.hops { tokens.append(token(ObjectIdentifier(hop))) }
        tokens.append(token(ObjectIdentifier(path.leaf)))
        guard let collection = path.collection else {
            tokens.append(0)
            return true
        }
        guard collection.filter == nil else { return false }
        tokens.append(1 + CollectionFunction.allCases.firstIndex(of: collection.function)!)
        tokens.append(collection.member.map { token(ObjectIdentifier($0)) } ?? 0)
        return true
    }

    // MARK: - The arguments

    /// The values `sql(node, …)` binds, in its order. Comparisons, lists and ranges bind their
    /// values here; a string operator on a text attribute binds as its `TextAttributeMatch`
    /// says, as in `sql`; any other string operator, whose binding the dialect decides, is
    /// written by the dialect and its text dropped, so the two cannot differ there.
    private func collectArguments(_ node: Node, positive: Bool, into arguments: inout [Value]) {
        switch node {
        case .constant:
            return
        case .and(let a, let b), .or(let a, let b):
            collectArguments(a, positive: positive, into: &arguments)
            collectArguments(b, positive: positive, into: &arguments)
            return
        case .not(let a):
            collectArguments(a, positive: !positive, into: &arguments)
            return
        case .quantified:
            preconditionFailure("unreachable: a quantifier has no shape, so its query is written afresh")
        case .text, .oneOf, .between, .compare:
            // Selected as a superset (TRUE or FALSE), filtered in memory: binds nothing.
            if Self.inexactComparison(dialect, in: node) != nil { return }
        }
        switch node {
        case .text(let value, let op, .value(.text(let constant)), let options):
            if let match = dialect.textAttributeMatch(op, options, constant: constant, column: value.isColumn) {
                collectArguments(value, folding: [], into: &arguments)
                match.bind(into: &arguments)
            } else {
                // The dialect's own function: how it binds is its to decide.
                _ = Self.sql(node, aliases: tableAliases, outer: [:], dialect: dialect, positive: positive, arguments: &arguments)
            }
        case .text:
            _ = Self.sql(node, aliases: tableAliases, outer: [:], dialect: dialect, positive: positive, arguments: &arguments)
        case .oneOf(let left, let list, let options):
            if list.isEmpty { return }
            collectArguments(left, folding: options, into: &arguments)
            for value in list { arguments.append(Self.fold(value, options)) }
        case .between(let left, let low, let high, let options):
            collectArguments(left, folding: options, into: &arguments)
            arguments.append(Self.fold(low, options))
            arguments.append(Self.fold(high, options))
        case .compare(let left, _, let right, let options):
            collectArguments(left, folding: options, into: &arguments)
            if case .value(.null) = right { return }
            collectArguments(right, folding: options, into: &arguments)
        case .constant, .and, .or, .not, .quantified:
            preconditionFailure("unreachable: handled above")
        }
    }

    /// The values `term(term, folding: options, …)` binds: a constant, folded; nothing for a
    /// column, a collection without a condition or the key; both sides of arithmetic.
    private func collectArguments(_ term: Term, folding options: MatchOptions, into arguments: inout [Value]) {
        switch term {
        case .value(let value):
            arguments.append(Self.fold(value, options))
        case .path, .identity:
            return
        case .arithmetic(let a, _, let b):
            collectArguments(a, folding: [], into: &arguments)
            collectArguments(b, folding: [], into: &arguments)
        case .outer:
            preconditionFailure("unreachable: a condition of an outer query has no shape")
        }
    }
}
