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
