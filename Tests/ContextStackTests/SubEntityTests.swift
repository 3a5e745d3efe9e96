@testable import ContextStack
import _ContextStackCore
@testable import _ContextStackModel
import _ContextStackSQLite
@testable import _ContextStackSQLiteStore
import Foundation
import Testing

@Suite struct SubEntityTests {
    @Test(arguments: Setup.all) @MainActor
    func subEntitiesShareTheParentTableAndComeWithItsFetches(setup: Setup) async throws {
        let harness = try TopologyHarness(setup)
        let world = harness.world
        try await harness.write { update in
            let team = try update.create(Team.self)
            team.title = "Core"
            let ada = try update.create(Engineer.self)
            ada.name = "Ada"
            ada.language = "C"
            ada.team = team
            let grace = try update.create(Manager.self)
            grace.name = "Grace"
            grace.reports = 3
            team.members.insert(grace)
            try update.create(Staff.self).name = "Sam"
            #expect(Set(team.members.map(\.name)) == ["Ada", "Grace"])
            try update.commit()
        }
        let staff = try world.fetchAll(Staff.self, orderBy: .ascending("name"))
        #expect(staff.map(\.name) == ["Ada", "Grace", "Sam"])
        #expect((staff[0] as? Engineer)?.language == "C")
        #expect((staff[1] as? Manager)?.reports == 3)
        #expect(try world.fetchAll(Engineer.self).map(\.name) == ["Ada"])
        #expect(try world.fetchCount(Manager.self) == 1)
        #expect(try world.fetchAll(Engineer.self, %"language" == "C").count == 1)
        #expect(throws: QueryError.self) { _ = try world.fetchAll(Staff.self, %"language" == "C") }
        let team = try #require(try world.fetch(Team.self))
        #expect(Set(team.members.map(\.name)) == ["Ada", "Grace"])
        #expect(staff[0].team === team)
        // An ID names the root entity, whose table and keys its sub-entities share
        // (Docs/GettingStarted.md, "Object IDs").
        #expect(staff[0].objectID.entityName == "Staff")
        #expect("\(staff[0].objectID)".hasPrefix("Staff/"))
        try await harness.stack.flush()
        #expect(try harness.store.scalar("SELECT count(*) FROM \"Staff\"") == .integer(3))
        if setup.kind == .file {
            let reopened = try MainContext(stack: harness.store.reopen())
            let engineer = try #require(try reopened.fetch(Staff.self, %"name" == "Ada") as? Engineer)
            #expect(engineer.language == "C")
            #expect(engineer.team?.title == "Core")
        }
    }

    @Test @MainActor func slotsOfASubEntityFollowItsParent() {
        #expect(Engineer.entityDescription.slotBase == 2)
        #expect(Engineer.entityDescription.superentity === Staff.entityDescription)
        #expect(Manager.entityDescription.slotBase == 2)
    }
}

/// A to-many relationship whose destination is a sub-entity, with its inverse declared on
/// that sub-entity: a sibling sub-entity's rows share the table but have fewer slots.
@Entity class Aircrew: ManagedObject {
    var name: String = ""
}

@Entity final class FlightPilot: Aircrew {
    var licence: String = ""
    @Relationship(inverse: \Squadron.pilots) var squadron: Squadron?
}

@Entity final class CabinSteward: Aircrew {}

@Entity final class Squadron: ManagedObject {
    var title: String = ""
    @Relationship var pilots: Set<FlightPilot>
    @Relationship var lead: FlightPilot?
}

@Suite struct SubEntityDestinationTests {
    static let types: [ManagedObject.Type] = [Aircrew.self, FlightPilot.self, CabinSteward.self, Squadron.self]

    /// A snapshot naming, for a relationship to a sub-entity, an object of a sibling sub-entity
    /// (its ID decodes: IDs name the root) is refused by `apply` as naming no such object, a
    /// `MergeConflictError` a server answers with 422. It trapped in `setToOne` — a client's
    /// JSON could stop the process.
    @Test(arguments: StoreKind.available)
    func applyingASnapshotThatNamesASiblingSubEntityIsRefused(kind: StoreKind) async throws {
        let store = try TestStore(kind, types: Self.types)
        let context = try ContextStack.Context(stack: store.stack, updateTarget: .persistentStore)
        let (squadron, steward) = try context.beginUpdateAndWait { update in
            let squadron = try update.create(Squadron.self)
            let steward = try update.create(CabinSteward.self)
            (squadron.title, steward.name) = ("Blue", "Sam")
            try update.commit()
            return (squadron.objectID, steward.objectID)
        }
        let stored = try #require(try await context.snapshot(Squadron.self, id: squadron))
        var lead = stored
        lead.lead = steward
        var pilots = stored
        pilots.pilots = [steward]
        for edited in [lead, pilots] {
            let error = try await #require(throws: MergeConflictError.self) {
                try await context.transaction { update in try update.apply(edited) }
            }
            #expect(error.conflicts.map(\.ours) == [.text(steward.description)])
        }
        #expect(try await context.snapshot(Squadron.self, id: squadron) == stored)
    }

    /// A condition on the to-many, read while a sibling's row is pending, looks only at rows
    /// of the destination. (It read the inverse's slot of every pending row of the table, and
    /// a steward's row has fewer slots: the process trapped on an index out of range.)
    @Test(arguments: StoreKind.available)
    func aConditionOnAToManyOfASubEntityPassesOverASiblingsPendingRow(kind: StoreKind) throws {
        let store = try TestStore(kind, types: Self.types)
        let context = try ContextStack.Context(stack: store.stack)
        try context.beginUpdateAndWait { update in
            let squadron = try update.create(Squadron.self)
            squadron.title = "Blue"
            let pilot = try update.create(FlightPilot.self)
            (pilot.name, pilot.licence, pilot.squadron) = ("Ada", "x", squadron)
            try update.commit()
        }
        try context.beginUpdateAndWait { update in
            try update.create(CabinSteward.self).name = "Sam"
            #expect(try update.fetchAll(Squadron.self, %"pilots.@count" > 0).map(\.title) == ["Blue"])
            #expect(try update.fetchAll(Squadron.self, %"pilots.licence"%.any == "x").map(\.title) == ["Blue"])
        }
    }

    /// `fetchOrCreate` given an object of a sibling sub-entity for a relationship throws
    /// `.typeMismatch` (it passed the root entities' check and trapped when it related them).
    @Test(arguments: StoreKind.available)
    func fetchOrCreateRefusesAnObjectOfASiblingSubEntity(kind: StoreKind) throws {
        let store = try TestStore(kind, types: Self.types)
        let context = try ContextStack.Context(stack: store.stack)
        try context.beginUpdateAndWait { update in
            let steward = try update.create(CabinSteward.self)
            steward.name = "Sam"
            try update.commit()
            let error = #expect(throws: QueryError.self) { try update.fetchOrCreate(Squadron.self, %"lead" == steward) }
            #expect(error?.code == .typeMismatch, "\(String(describing: error))")
            #expect(try update.fetchCount(Squadron.self) == 0)
        }
    }
}
