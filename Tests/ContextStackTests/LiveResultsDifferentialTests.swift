@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

/// Live results against refetching: after every random commit, the batch a `FetchedResults`
/// emitted, applied to the snapshot before it the way a table view applies a batch update,
/// must give exactly what a fresh fetch gives — in every topology.
@Suite(.timeLimit(.minutes(5))) struct LiveResultsDifferentialTests {
    /// One section of a snapshot: its name and its objects.
    struct SnapSection: Equatable, CustomStringConvertible {
        var name: String?
        var ids: [ObjectID]
        var description: String { "\(name ?? "nil"): \(ids.map(\.primaryKey))" }
    }

    /// The results under test: each exercises another path (in place, descending sections,
    /// one section, a window, a key path).
    struct Shape {
        let label: String
        let condition: Condition?
        let orderBy: OrderBy
        let sectioned: Bool
        let options: FetchOptions
    }

    static let shapes = [
        Shape(label: "sections", condition: %"age" > 18, orderBy: .ascending("location") | .ascending("name"),
              sectioned: true, options: FetchOptions()),
        Shape(label: "descending sections", condition: %"age" <= 30 || %"location" == nil,
              orderBy: .descending("location") | .descending("age"), sectioned: true, options: FetchOptions()),
        Shape(label: "one section", condition: nil, orderBy: .ascending("age"), sectioned: false, options: FetchOptions()),
        Shape(label: "window", condition: %"age" > 5, orderBy: .ascending("name"), sectioned: false,
              options: .limit(4) | .offset(2)),
        Shape(label: "key path", condition: %"friend.age" > 20, orderBy: .ascending("name"), sectioned: false,
              options: FetchOptions()),
        Shape(label: "two hops, sections", condition: %"friend.friend.age" < 30 || %"friend" == nil,
              orderBy: .ascending("location") | .descending("age"), sectioned: true, options: FetchOptions()),
        Shape(label: "key path order", condition: %"age" > 10, orderBy: .ascending("friend.name") | .ascending("name"),
              sectioned: false, options: FetchOptions()),
    ]

    enum Op {
        case insert(name: String, age: Int, location: String?)
        case delete(ObjectID)
        case age(ObjectID, Int)
        case name(ObjectID, String)
        case location(ObjectID, String?)
        case email(ObjectID)
        case friend(ObjectID, ObjectID?)
        case pet(ObjectID)
    }

    static let names = ["Ann", "Bob", "Cid", "Dee", "Eve", "Fay"]
    static let locations: [String?] = ["Oslo", "Rome", "Taipei", nil]

    @Test(arguments: Setup.all) @MainActor
    func appliedBatchesEqualFreshFetches(setup: Setup) async throws {
        for seed in propertySeeds() {
            try await run(setup, seed: seed)
        }
    }

    @MainActor private func run(_ setup: Setup, seed: UInt64) async throws {
        var random = SeededGenerator(seed: seed)
        let harness = try TopologyHarness(setup)
        var alive: [ObjectID] = []
        // Start with some people, so the first commits move things around.
        let initial: [Op] = (0..<12).map { _ in
            .insert(name: Self.names.randomElement(using: &random)!, age: Int.random(in: 0...40, using: &random),
                    location: Self.locations.randomElement(using: &random)!)
        }
        alive += try commit(initial, harness)
        try await harness.settle()

        let world = harness.world
        var results: [FetchedResults<Person>] = []
        var received: [[ResultsChange]] = []
        for (index, shape) in Self.shapes.enumerated() {
            let live = try FetchedResults(context: world, Person.self, shape.condition, orderBy: shape.orderBy,
                                          sectionBy: shape.sectioned ? %"location" : nil, options: shape.options)
            received.append([])
            live.onChange = { change in received[index].append(change) }
            results.append(live)
        }
        for step in 0..<30 {
            var snapshots = results.map(Self.snapshot)
            for (index, shape) in Self.shapes.enumerated() {
                #expect(snapshots[index] == (try fresh(shape, world)), "\(setup) seed \(seed) \(shape.label): results differ from a fetch before step \(step)")
            }
            // A commit of one to four operations on distinct people.
            var ops: [Op] = []
            let before = try Self.everyone(world)
            var targets = alive.shuffled(using: &random)
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                let choice = Int.random(in: 0..<10, using: &random)
                if choice == 0 || targets.isEmpty {
                    ops.append(.insert(name: Self.names.randomElement(using: &random)!, age: Int.random(in: 0...40, using: &random),
                                       location: Self.locations.randomElement(using: &random)!))
                    continue
                }
                let id = targets.removeLast()
                switch choice {
                case 1: ops.append(.delete(id))
                case 2, 3: ops.append(.age(id, Int.random(in: 0...40, using: &random)))
                case 4: ops.append(.name(id, Self.names.randomElement(using: &random)!))
                case 5, 6: ops.append(.location(id, Self.locations.randomElement(using: &random)!))
                case 7: ops.append(.email(id))
                case 8: ops.append(.friend(id, alive.randomElement(using: &random)))
                default: ops.append(.pet(id))
                }
            }
            for index in received.indices { received[index] = [] }
            let inserted = try commit(ops, harness)
            for case .delete(let id) in ops { alive.removeAll { $0 == id } }
            alive += inserted
            try await harness.settle()
            await mainQueueTurn()
            let after = try Self.everyone(world)
            let changed = Set(before.keys.filter { after[$0] != nil && after[$0] != before[$0] })

            for (index, shape) in Self.shapes.enumerated() {
                let context = "\(setup) seed \(seed) step \(step) \(shape.label)"
                let now = Self.snapshot(results[index])
                let expected = try fresh(shape, world)
                #expect(now == expected, "\(context): results differ from a fresh fetch")
                #expect(try Self.values(results[index]) == Self.values(of: expected, in: world), "\(context): stale values")
                let batches = received[index]
                #expect(batches.count <= 1, "\(context): one commit gave \(batches.count) batches")
                guard let batch = batches.first else {
                    #expect(snapshots[index] == expected, "\(context): the results changed but no batch came")
                    continue
                }
                let applied = Self.apply(batch, to: snapshots[index], newData: now, context: context)
                #expect(applied == expected, "\(context): \(batch) applied to \(snapshots[index]) gives \(applied.map(\.description)), not \(expected)")
                let all = applied.flatMap(\.ids)
                #expect(Set(all).count == all.count, "\(context): an object appears twice")
                Self.checkUpdates(batch, old: snapshots[index], new: expected, changed: changed, context: context)
                snapshots[index] = now
            }
        }
        withExtendedLifetime(results) {}
    }

    /// Commits `ops`; returns the IDs of the people it inserted.
    @MainActor private func commit(_ ops: [Op], _ harness: TopologyHarness) throws -> [ObjectID] {
        try harness.update { update in
            var inserted: [ObjectID] = []
            func person(_ id: ObjectID) throws -> Person { try #require(try update.fetch(Person.self, id: id)) }
            for op in ops {
                switch op {
                case .insert(let name, let age, let location):
                    let person = try update.create(Person.self)
                    (person.name, person.age, person.location) = (name, age, location)
                    inserted.append(person.objectID)
                case .delete(let id): try update.delete(person(id))
                case .age(let id, let age): try person(id).age = age
                case .name(let id, let name): try person(id).name = name
                case .location(let id, let location): try person(id).location = location
                case .email(let id): try person(id).email = UUID().uuidString
                case .friend(let id, let friend): try person(id).friend = try friend.flatMap { try update.fetch(Person.self, id: $0) }
                case .pet(let id): try update.create(Pet.self).owner = try person(id)
                }
            }
            try update.commit()
            return inserted
        }
    }

    @MainActor private func fresh(_ shape: Shape, _ world: MainContext) throws -> [SnapSection] {
        let people = try world.fetchAll(Person.self, shape.condition, orderBy: shape.orderBy, options: shape.options)
        guard shape.sectioned else { return [SnapSection(name: nil, ids: people.map(\.objectID))] }
        var sections: [SnapSection] = []
        for person in people {
            if sections.isEmpty || sections[sections.count - 1].name != person.location {
                sections.append(SnapSection(name: person.location, ids: []))
            }
            sections[sections.count - 1].ids.append(person.objectID)
        }
        return sections
    }

    /// Every person's stored values, by ID.
    @MainActor static func everyone(_ world: MainContext) throws -> [ObjectID: String] {
        var values: [ObjectID: String] = [:]
        for person in try world.fetchAll(Person.self) {
            values[person.objectID] = "\(person.name) \(person.age) \(person.location ?? "nil") \(person.email ?? "") \(person.friend?.objectID.primaryKey ?? 0)"
        }
        return values
    }

    @MainActor static func snapshot(_ results: FetchedResults<Person>) -> [SnapSection] {
        results.sections.map { SnapSection(name: $0.name, ids: $0.objects.map(\.objectID)) }
    }

    @MainActor static func values(_ results: FetchedResults<Person>) -> [String] {
        results.objects.map { "\($0.name) \($0.age) \($0.location ?? "nil") \($0.email ?? "")" }
    }

    @MainActor static func values(of sections: [SnapSection], in world: MainContext) throws -> [String] {
        try sections.flatMap(\.ids).map { id in
            let person = try #require(try world.fetch(Person.self, id: id))
            return "\(person.name) \(person.age) \(person.location ?? "nil") \(person.email ?? "")"
        }
    }

    /// Applies a batch as UIKit does: removals in old coordinates (rows descending, then
    /// sections), then insertions in new coordinates (sections, then rows ascending), reading
    /// inserted content from the new data. Out-of-range paths are recorded, not trapped on.
    static func apply(_ change: ResultsChange, to old: [SnapSection], newData: [SnapSection], context: String) -> [SnapSection] {
        var sections = old
        func valid(_ path: IndexPath, in sections: [SnapSection]) -> Bool {
            sections.indices.contains(path.section) && sections[path.section].ids.indices.contains(path.item)
        }
        var moved: [IndexPath: ObjectID] = [:]
        for move in change.movedRows {
            guard valid(move.from, in: old) else { Issue.record("\(context): move from \(move.from) is out of range"); return [] }
            moved[move.to] = old[move.from.section].ids[move.from.item]
        }
        let removals = (change.deletedRows + change.movedRows.map(\.from)).sorted(by: >)
        #expect(Set(removals).count == removals.count, "\(context): a row is removed twice")
        for path in removals {
            guard valid(path, in: old) else { Issue.record("\(context): removal at \(path) is out of range"); return [] }
            #expect(!change.deletedSections.contains(path.section), "\(context): row \(path) listed in a deleted section")
            sections[path.section].ids.remove(at: path.item)
        }
        for section in change.deletedSections.sorted(by: >) {
            guard sections.indices.contains(section) else { Issue.record("\(context): deleted section \(section) is out of range"); return [] }
            sections.remove(at: section)
        }
        for section in change.insertedSections.sorted() {
            guard newData.indices.contains(section), section <= sections.count else {
                Issue.record("\(context): inserted section \(section) is out of range"); return []
            }
            sections.insert(newData[section], at: section)
        }
        let insertions = (change.insertedRows + change.movedRows.map(\.to)).sorted()
        for path in insertions {
            #expect(!change.insertedSections.contains(path.section), "\(context): row \(path) listed in an inserted section")
            guard sections.indices.contains(path.section), path.item <= sections[path.section].ids.count,
                  valid(path, in: newData) else {
                Issue.record("\(context): insertion at \(path) is out of range"); return []
            }
            sections[path.section].ids.insert(moved[path] ?? newData[path.section].ids[path.item], at: path.item)
        }
        return sections
    }

    /// Updated rows are in old coordinates, on objects that neither left nor moved; every
    /// object the commit changed that stayed in place is among them.
    static func checkUpdates(_ change: ResultsChange, old: [SnapSection], new: [SnapSection], changed: Set<ObjectID>, context: String) {
        let removed = Set(change.deletedRows + change.movedRows.map(\.from))
        var reported = Set<ObjectID>()
        for path in change.updatedRows {
            guard old.indices.contains(path.section), old[path.section].ids.indices.contains(path.item) else {
                Issue.record("\(context): update at \(path) is out of range")
                continue
            }
            #expect(!removed.contains(path) && !change.deletedSections.contains(path.section), "\(context): update at \(path) also removed")
            reported.insert(old[path.section].ids[path.item])
        }
        if change.isReload { return }
        let movedOrRemoved = Set((change.movedRows.map(\.from) + change.deletedRows).compactMap { path in
            old.indices.contains(path.section) && old[path.section].ids.indices.contains(path.item) ? old[path.section].ids[path.item] : nil
        })
        let inOldSections = Set(change.deletedSections.flatMap { old.indices.contains($0) ? old[$0].ids : [] })
        let stayed = Set(old.flatMap(\.ids)).intersection(new.flatMap(\.ids))
        for id in changed.intersection(stayed) where !movedOrRemoved.contains(id) && !inOldSections.contains(id) {
            #expect(reported.contains(id), "\(context): \(id) changed in place but no update was reported")
        }
    }
}
