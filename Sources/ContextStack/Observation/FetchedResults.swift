import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// A fetch that stays true as commits land, split into sections, telling you exactly what
/// changed after each commit.
///
/// For example:
///
/// ```swift
/// let results = try FetchedResults(context: world, Person.self, %"age" > 18,
///                                  orderBy: .ascending("location") | .ascending("name"),
///                                  sectionBy: %"location")
/// for section in results.sections { print(section.name ?? "—", section.objects.map(\.name)) }
/// let first = results.object(at: IndexPath(item: 0, section: 0))
/// for await change in results.changes {
///     print(change)   // ResultsChange(inserted: [1.0], moved: [0.2→0.0])
/// }
/// ```
///
/// Sections are named by the values of the `sectionBy` key, in the order of the sort; the
/// order starts with the section key (when `orderBy` does not, the results sort by it first,
/// ascending). Without `sectionBy` there is exactly one section, empty or not.
///
/// The results follow the main context: where it merges commits (`.mainContext`,
/// `.rootContext(autoMerge: true)`), each commit updates them in place from its change set —
/// a commit touching k objects costs about k log n, never a refetch — when the order reads
/// only the entity's own attributes and the condition no quantifier or `@count` (to-one key
/// paths are fine: objects reaching a changed object are touched too); otherwise, and with
/// `.limit`/`.offset`, they refetch and diff. Where the context does not
/// merge, they change when it resets (`reset()`, or `resetOnCommitOf:`): they reload and report
/// the difference. See `Docs/Observation.md`.
@MainActor
public final class FetchedResults<T: ManagedObject> {
    /// One section: the objects that share a value of the `sectionBy` key.
    public struct Section {
        /// The section key's value for every object of the section (`.null` without `sectionBy`).
        public let value: Value
        /// The objects, in order.
        public internal(set) var objects: [T]
        /// The values each object was placed by, in step with `objects`.
        var rows: [ContiguousArray<Value>]

        /// The section's name: the key's value as text, `nil` for NULL (and without `sectionBy`).
        public var name: String? {
            switch value {
            case .null: nil
            case .text(let text): text
            case .integer(let number): String(number)
            case .double(let number): String(number)
            case .blob(let data): data.base64EncodedString()
            }
        }

        /// How many objects the section holds.
        public var count: Int { objects.count }
    }

    /// How the results keep up with commits.
    enum Strategy {
        /// Evaluate condition and order in memory for the objects a commit touched.
        case incremental
        /// Refetch and diff (key paths, quantifiers, counts, a window).
        case refetch
        /// Refetch, filter, and replace everything (an `objectFilter`).
        case reload
    }

    /// The context the results read.
    public let context: MainContext
    /// The sections, in order.
    public internal(set) var sections: [Section] = []
    /// Called on the main actor with each change, before the `changes` streams get it.
    public var onChange: (@MainActor (ResultsChange) -> Void)?
    /// Called after a reset of the context that changed nothing the results show: their
    /// objects are new all the same (the reset let the old ones go). Fetch streams yield then.
    var afterQuietReset: (@MainActor () -> Void)?

    let query: CompiledQuery
    let strategy: Strategy
    /// The slot of the section key, and whether sections ascend.
    private let sectionSlot: Int?
    private let sectionsAscend: Bool
    private let offset: Int
    private let limit: Int?
    private let objectFilter: (@MainActor (T) -> Bool)?
    /// Whether the context merges commits (otherwise only its resets matter).
    private let merges: Bool
    /// The root entities whose changes can change the results.
    private let relevantRoots: Set<ObjectIdentifier>
    /// Every object in the results, with the values it was placed by (incremental strategy).
    var placed: [ObjectID: ContiguousArray<Value>] = [:]
    /// Index paths by object, built on demand (refetching strategies).
    private var indexCache: [ObjectID: IndexPath]?
    private var observation: CommitObservation?
    /// Set when following a commit or a reset failed: the results may lack what it changed (or,
    /// after a reset, hold nothing), and a later commit's changes alone would not bring that
    /// back, so the next commit that reaches them refetches them whole.
    private var mustRefetch = false
    /// The changes being handed over, the first one now (`emit`).
    private var emitting: [ResultsChange] = []
    /// How many times the results ran their whole fetch (for tests of the incremental path).
    private(set) var fetchCount = 0
    private let streams = Locked<(next: UInt64, continuations: [UInt64: AsyncStream<ResultsChange>.Continuation])>((0, [:]))

    /// Fetches the results and starts following commits.
    ///
    /// - Parameters:
    ///   - context: the main context to read.
    ///   - type: the entity.
    ///   - condition: which objects; `nil` for all.
    ///   - orderBy: their order (ties in primary-key order). Put the section key first.
    ///   - sectionBy: an attribute of the entity whose values split the results into sections.
    ///   - options: `.limit` and `.offset` window the ordered results (the window is
    ///     recomputed after each commit, so objects slide in and out of it);
    ///     `.noSubEntities` and `.tweak` work as in a fetch. `.batch`, `.prefetch`,
    ///     `.propertiesOnly` and `.noPropertyValues` are accepted and change nothing: the
    ///     results hold their objects with all their values.
    ///   - objectFilter: a further test each object must pass, run on the main actor; with one,
    ///     every relevant commit refetches and reports a reload (`isReload`).
    /// - Throws: `QueryError` for an unknown key, a wrong value type, or a `sectionBy` key
    ///   that is not an attribute of the entity.
    public init(context: MainContext, _ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                sectionBy: Key? = nil, options: FetchOptions = FetchOptions(),
                objectFilter: (@MainActor (T) -> Bool)? = nil) throws {
        self.context = context
        let entity = context.core.graph.entity(for: type)
        // The request as a fetch would run it: `.tweak` closures included.
        let request = FetchRequest(condition: condition, orderBy: orderBy, options: options)
        var terms = request.orderBy?.terms ?? []
        if let sectionBy {
            let path = try CompiledQuery.resolvePath(sectionBy.path, in: entity)
            guard path.hops.isEmpty, path.collection == nil, path.leaf.attributeKind != nil, path.leaf.isStored else {
                throw QueryError(.unsupported, "Cannot section \(entity.name) by '\(sectionBy.path)': sections need a stored attribute of \(entity.name) itself.", key: sectionBy.path, entity: entity.name)
            }
            if terms.first?.key != sectionBy.path { terms.insert(OrderBy.Term(key: sectionBy.path, ascending: true), at: 0) }
            sectionSlot = path.leaf.slot
            sectionsAscend = terms[0].ascending
        } else {
            sectionSlot = nil
            sectionsAscend = true
        }
        query = try CompiledQuery(entity: entity, condition: request.condition, orderBy: OrderBy(terms: terms),
                                  includesSubEntities: request.includesSubEntities, dialect: context.core.store.dialect)
        offset = request.offset
        limit = request.limit
        self.objectFilter = objectFilter
        if objectFilter != nil {
            strategy = .reload
        } else if query.toManyUses.isEmpty && limit == nil && offset == 0 && query.order.allSatisfy({ $0.path.hops.isEmpty }) {
            // A condition through to-one key paths stays incremental: a commit also touches the
            // objects whose paths lead to what it changed (found by their foreign keys).
            strategy = .incremental
        } else {
            strategy = .refetch
        }
        merges = context.updateTarget == .mainContext || context.updateTarget == .rootContext(autoMerge: true)
        relevantRoots = Self.roots(of: query)
        // Registered before the fetch: a commit published from then on is delivered (after this
        // init, on the main actor); one published before is visible, so the fetch reads it.
        observation = context.stack.commits.addLiveObserver { [weak self] commit in self?.process(commit) }
        sections = try fetchSections()
        if strategy == .incremental { indexAll() }
        context.live.add(self)
    }

    deinit {
        for continuation in streams.withLock({ $0.continuations.values }) { continuation.finish() }
    }

    // MARK: - Reading

    /// Every object, section after section.
    public var objects: [T] { sections.flatMap(\.objects) }

    /// How many objects the results hold.
    public var count: Int { sections.reduce(0) { $0 + $1.objects.count } }

    /// The object at `indexPath`; an index path outside the results is a precondition failure.
    public func object(at indexPath: IndexPath) -> T {
        guard indexPath.count == 2, sections.indices.contains(indexPath[0]),
              sections[indexPath[0]].objects.indices.contains(indexPath[1]) else {
            preconditionFailure("FetchedResults.object(at: \(indexPath)): no such object — the results have \(sections.count) sections of \(sections.map(\.objects.count)) objects. Check indexPath(for:) or the sections first.")
        }
        return sections[indexPath[0]].objects[indexPath[1]]
    }

    /// Where `object` is, or `nil` when it is not in the results.
    public func indexPath(for object: T) -> IndexPath? {
        if strategy == .incremental {
            guard let values = placed[object.objectID] else { return nil }
            return try? locate(object.objectID, values)
        }
        if indexCache == nil {
            var cache: [ObjectID: IndexPath] = [:]
            for (s, section) in sections.enumerated() {
                for (i, member) in section.objects.enumerated() { cache[member.objectID] = .at(s, i) }
            }
            indexCache = cache
        }
        return indexCache?[object.objectID]
    }

    /// The changes, one per commit (or reset) that changed the results, as an asynchronous
    /// sequence delivered on the main actor. Each access makes a new sequence; it ends when
    /// the consumer stops iterating or the results are released.
    public var changes: AsyncStream<ResultsChange> {
        let (stream, continuation) = AsyncStream<ResultsChange>.makeStream(bufferingPolicy: .unbounded)
        let streams = self.streams
        let id = streams.withLock { state in
            defer { state.next += 1 }
            state.continuations[state.next] = continuation
            return state.next
        }
        continuation.onTermination = { _ in streams.withLock { _ = $0.continuations.removeValue(forKey: id) } }
        return stream
    }

    // MARK: - Following commits

    private func process(_ commit: Commit) {
        // A context reset for this very commit reloaded the results already (`contextDidReset`).
        guard merges, context.resetForDelivery != context.stack.commits.deliveries else { return }
        follow(commit.inserted + commit.updated + commit.deleted)
    }

    /// Takes in what a commit, or a correction of the context's view, did to the objects `ids`.
    private func follow(_ ids: [ObjectID]) {
        do {
            if mustRefetch {
                try reload(touched: Set(ids))
                mustRefetch = false
                return
            }
            switch strategy {
            case .incremental:
                let root = query.entity.rootDescription
                var seen = Set<ObjectID>()
                let touched = ids.filter { $0.rootEntity === root && seen.insert($0).inserted }
                var changed: [ObjectIdentifier: Set<Int64>] = [:]
                if !query.hopChains.isEmpty {
                    for id in ids where relevantRoots.contains(ObjectIdentifier(id.rootEntity)) {
                        changed[ObjectIdentifier(id.rootEntity), default: []].insert(id.primaryKey)
                    }
                }
                guard !touched.isEmpty || !changed.isEmpty else { return }
                try applyIncrementally(touched, referencing: changed)
            case .refetch, .reload:
                guard ids.contains(where: { relevantRoots.contains(ObjectIdentifier($0.rootEntity)) }) else { return }
                try reload(touched: Set(ids))
            }
        } catch {
            mustRefetch = true
            context.stack.report(error)
        }
    }

    /// After a correction of the view of a context that does not merge (what undoes a commit
    /// the view showed that then failed to save, or the writer's rewrite of one): the objects it
    /// touched changed as a commit's would have, and the results follow them likewise.
    func contextWasCorrected(touched: [ObjectID]) {
        guard !merges else { return }
        follow(touched)
    }

    /// After the context reset: every object is new, so reload and report the difference.
    ///
    /// When the reload fails, the old objects are no longer valid (the context let them go), so
    /// the results empty (one empty section without `sectionBy`), reported as a reload, and
    /// are fetched whole again at the next commit that reaches them or the next reset.
    func contextDidReset(touched: Set<ObjectID>) {
        do {
            let reported = try reload(touched: touched)
            mustRefetch = false
            if !reported { afterQuietReset?() }
        } catch {
            let oldSectionCount = sections.count
            sections = keepsEmptySection ? [Section(value: .null, objects: [], rows: [])] : []
            placed = [:]
            indexCache = nil
            mustRefetch = true
            emit(ResultsDiff.reload(oldSectionCount: oldSectionCount, newSectionCount: sections.count))
            context.stack.report(error)
        }
    }

    /// Refetches, and reports the difference between the old and the new contents; says
    /// whether there was one.
    @discardableResult
    func reload(touched: Set<ObjectID>) throws -> Bool {
        let old = sections
        let fresh = try fetchSections()
        var oldRows: [ObjectID: ContiguousArray<Value>] = [:]
        for section in old {
            for (object, row) in zip(section.objects, section.rows) { oldRows[object.objectID] = row }
        }
        func ids(_ sections: [Section]) -> SectionedIDs {
            SectionedIDs(sections: sections.map { ($0.value, $0.objects.map(\.objectID)) })
        }
        var newRows: [ObjectID: ContiguousArray<Value>] = [:]
        for section in fresh {
            for (object, row) in zip(section.objects, section.rows) { newRows[object.objectID] = row }
        }
        var change = ResultsDiff.diff(ids(old), ids(fresh)) { id in
            guard !touched.contains(id) else { return true }
            guard let before = oldRows[id], let after = newRows[id], before.count == after.count else { return true }
            return !zip(before, after).allSatisfy { $0.isIdentical(to: $1) }
        }
        sections = fresh
        indexCache = nil
        if strategy == .incremental { indexAll() }
        guard !change.isEmpty else { return false }
        if strategy == .reload {
            change = ResultsDiff.reload(oldSectionCount: old.count, newSectionCount: fresh.count)
        }
        emit(change)
        return true
    }

    /// Hands `change` to `onChange`, then to the `changes` streams. A change made while one is
    /// being handed over — `onChange` reset the context, and the results reloaded — waits for
    /// it: `onChange` is not entered twice, and the streams get the batches in the order they
    /// happened (before, the streams got the nested batch first).
    func emit(_ change: ResultsChange) {
        emitting.append(change)
        guard emitting.count == 1 else { return }
        while let change = emitting.first {
            onChange?(change)
            for continuation in streams.withLock({ Array($0.continuations.values) }) { continuation.yield(change) }
            emitting.removeFirst()
        }
    }

    // MARK: - Fetching

    /// The results as a fresh fetch gives them, in sections.
    func fetchSections() throws -> [Section] {
        let core = context.core
        fetchCount += 1
        core.beginRead()
        defer { core.endRead() }
        let windowInSQL = objectFilter == nil
        let rows = try core.fetchRows(query, offset: windowInSQL ? offset : 0, limit: windowInSQL ? limit : nil)
        var entries: [(object: T, values: ContiguousArray<Value>)] = []
        entries.reserveCapacity(rows.count)
        for (id, row) in rows {
            if let object = core.materialize(id, row) as? T { entries.append((object, row.values)) }
        }
        if let objectFilter {
            entries = entries.filter { objectFilter($0.object) }
            if offset > 0 { entries.removeFirst(min(offset, entries.count)) }
            if let limit, entries.count > limit { entries.removeLast(entries.count - limit) }
        }
        var sections: [Section] = sectionSlot == nil ? [Section(value: .null, objects: [], rows: [])] : []
        for (object, values) in entries {
            let value = sectionValue(values)
            if sections.last?.value != value || sections.isEmpty {
                sections.append(Section(value: value, objects: [], rows: []))
            }
            sections[sections.count - 1].objects.append(object)
            sections[sections.count - 1].rows.append(values)
        }
        return sections
    }

    func sectionValue(_ values: ContiguousArray<Value>) -> Value {
        sectionSlot.map { values[$0] } ?? .null
    }

    var keepsEmptySection: Bool { sectionSlot == nil }

    /// Whether section value `a` comes before `b`.
    func sectionBefore(_ a: Value, _ b: Value) -> Bool {
        let order = Value.compare(a, b)
        return sectionsAscend ? order < 0 : order > 0
    }

    func indexAll() {
        placed = [:]
        placed.reserveCapacity(count)
        for section in sections {
            for (object, row) in zip(section.objects, section.rows) { placed[object.objectID] = row }
        }
    }

    /// The root entities a query reads: its own, and those of every hop and member it follows.
    private static func roots(of query: CompiledQuery) -> Set<ObjectIdentifier> {
        var roots: Set<ObjectIdentifier> = [ObjectIdentifier(query.entity.rootDescription)]
        for chain in query.hopChains {
            for hop in chain { if let destination = hop.destination { roots.insert(ObjectIdentifier(destination.rootDescription)) } }
        }
        for use in query.toManyUses {
            if let destination = use.property.destination { roots.insert(ObjectIdentifier(destination.rootDescription)) }
            if let inner = use.inner { roots.formUnion(Self.roots(of: inner)) }
        }
        return roots
    }
}

/// The live results of one main context, told when it resets or its pinned view is corrected.
@MainActor final class LiveRegistry {
    private struct Member {
        weak var value: (any ContextResetObserver)?
    }
    private var members: [ObjectIdentifier: Member] = [:]

    func add(_ member: any ContextResetObserver) {
        members = members.filter { $0.value.value != nil }
        members[ObjectIdentifier(member)] = Member(value: member)
    }

    /// `touched`: what the commit the context was reset for touched (nothing for `reset()`),
    /// reported as updated where still shown.
    func contextDidReset(touched: Set<ObjectID> = []) {
        let current = members.values.compactMap(\.value)
        members = members.filter { $0.value.value != nil }
        for member in current { member.contextDidReset(touched: touched) }
    }

    /// A correction of a pinned view touched `touched` (`ContextCore.afterCorrection`).
    func contextWasCorrected(touched: [ObjectID]) {
        let current = members.values.compactMap(\.value)
        for member in current { member.contextWasCorrected(touched: touched) }
    }
}

/// Something that must reload when its main context resets, and follow corrections of the
/// view of one that does not merge.
@MainActor protocol ContextResetObserver: AnyObject {
    func contextDidReset(touched: Set<ObjectID>)
    func contextWasCorrected(touched: [ObjectID])
}

extension FetchedResults: ContextResetObserver {}
