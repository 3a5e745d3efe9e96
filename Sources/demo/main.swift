// The CoreDataMonk README story, on Linux: a farmer, a knight, a monk and a warrior.
//
//     swift run demo                                  # a store in a temporary directory
//     swift run demo people.sqlite                    # or a file you name (run twice: it is still there)
//     swift run demo --store postgres://user@host/db  # or a PostgreSQL database
import ContextStack
import ContextStackPostgres
import Foundation

@Entity final class Person: ManagedObject {
    var name: String = ""
    var age: Int = 0
    var location: String?
    @Relationship(inverse: \Person.friendOf) var friend: Person?
    @Relationship var friendOf: Set<Person>
    @Relationship(deleteRule: .cascade, inverse: \Pet.owner) var pets: Set<Pet>
}

@Entity final class Pet: ManagedObject {
    var name: String = ""
    var age: Int = 0
    @Relationship var owner: Person?
}

func describe(_ person: Person) -> String {
    var text = "\(person.name), \(person.age)"
    if let location = person.location { text += ", from \(location)" }
    if let friend = person.friend { text += ", friend of \(friend.name)" }
    if !person.pets.isEmpty { text += ", owns \(person.pets.map(\.name).sorted().joined(separator: " and "))" }
    return text
}

@MainActor func show(_ title: String, _ world: MainContext) throws {
    print("\n\(title)")
    for person in try world.fetchAll(Person.self, orderBy: .ascending("name")) {
        print("  - \(describe(person))")
    }
}

/// Where the demo keeps its people: an SQLite file, or a PostgreSQL database.
enum Place {
    case file(URL)
    case postgres(URL)

    /// What the demo's messages call the store.
    var name: String {
        switch self {
        case .file: "SQLite"
        case .postgres: "PostgreSQL"
        }
    }

    /// Adds the store to `stack`.
    func add(to stack: Stack) throws {
        switch self {
        case .file(let url): try stack.addDatabaseStore(at: url)
        case .postgres(let url): try stack.addPostgresStore(url: url)
        }
    }
}

var arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "--store" { arguments.removeFirst() }
let place: Place
// On SQLite, the per-consumer stack's file (and the store, unless named) go here; it is left
// for a look afterwards.
let directory = FileManager.default.temporaryDirectory.appendingPathComponent("contextstack-demo-\(UUID().uuidString)")
if let argument = arguments.first, argument.hasPrefix("postgres://") || argument.hasPrefix("postgresql://"), let url = URL(string: argument) {
    place = .postgres(url)
    print("ContextStack demo — store in PostgreSQL")
} else {
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let url = arguments.first.map { URL(fileURLWithPath: $0) } ?? directory.appendingPathComponent("world.sqlite")
    place = .file(url)
    print("ContextStack demo — store at \(url.path)")
}

let stack = try Stack(model: Model(Person.self, Pet.self))
stack.onError = { error in print("background error: \(error)") }
try place.add(to: stack)
let world = try MainContext(stack: stack)
print("— Three-tier (the default): update → main → root → \(place.name) —")
let before = try world.fetchCount(Person.self)
if before > 0 { print("The store already holds \(before) people from an earlier run.") }

// An update creates the farmer, and the knight if there is none yet, and makes them friends.
try world.beginUpdateAndWait { update in
    let farmer = try update.create(Person.self)
    farmer.name = "Farmer"
    farmer.age = 28
    farmer.location = "Taipei"
    let knight = try update.fetchOrCreate(Person.self, %"name" == "Knight" && %"age" == 18)
    knight.friend = farmer
    let dog = try update.create(Pet.self)
    dog.name = "Rex"
    dog.owner = farmer
    try update.commit()
    print("Update: created \(farmer.objectID) (the farmer) and \(knight.objectID) (the knight) — IDs are permanent from create on.")
}
// commit() returned: the main context sees the change already, though SQLite may not have it yet.
let knight = try world.fetch(Person.self, %"name" == "Knight")
print("Main context: the knight's friend is \(knight?.friend?.name ?? "nobody"); the farmer has \(knight?.friend?.friendOf.count ?? 0) friend(s).")
try await stack.flush()
print("flush(): everything committed is now in \(place.name).")

// A monk and a warrior, in a background update; we wait for durability with transaction.
let created = try await world.transaction { update in
    let monk = try update.create(Person.self)
    monk.name = "Monk"
    monk.age = 63
    let warrior = try update.create(Person.self)
    warrior.name = "Warrior"
    warrior.age = 35
    warrior.friend = try update.fetch(Person.self, %"name" == "Knight")
    return 2
}
print("transaction: created \(created) more people, durable when it resumed.")
try show("The main context sees:", world)

// The monk ages; the main context's object shows the new age as soon as commit() returns.
let monk = try world.fetch(Person.self, %"name" == "Monk")!
try world.beginUpdateAndWait { update in
    let mine = try update.use(monk)
    mine.age += 1
    try update.commit()
}
print("\nThe monk had a birthday: the main context's monk is now \(monk.age).")

// The warrior leaves: deleting nullifies the knight's friendOf; the farmer's pets cascade.
let warrior = try world.fetch(Person.self, %"name" == "Warrior")!
try world.beginUpdateAndWait { update in
    try update.delete(update.use(warrior))
    try update.commit()
}
print("The warrior was deleted: isDeleted = \(warrior.isDeleted), last known name \(warrior.name).")

let adults = try world.fetchAll(Person.self, %"age" >= 18 && %"location" == nil, orderBy: .descending("age"))
print("Adults with no location, oldest first: \(adults.map(\.name).joined(separator: ", "))")
print("People whose friend is older than 25: \(try world.fetchAll(Person.self, %"friend.age" > 25).map(\.name))")
let typed = try world.fetchAll(Person.self, .predicate(#Predicate<Person> { $0.age > 20 && $0.name.starts(with: "M") }))
print("#Predicate { $0.age > 20 && $0.name.starts(with: \"M\") }: \(typed.map(\.name))")
let statements = StatementCount()
stack.trace { _ in statements.add() }
let withFriends = try world.fetchAll(Person.self, orderBy: .ascending("name"), options: .prefetch(["friend", "pets"]))
let statementsBefore = statements.value
let described = withFriends.map { "\($0.name) (friend: \($0.friend?.name ?? "—"), pets: \($0.pets.count))" }
print("Prefetched: \(described.joined(separator: "; ")) — \(statements.value - statementsBefore) statements to follow them")
stack.trace(nil)
try await stack.flush()
try show("Finally, in \(place.name) and the main context:", world)

// MARK: - The topologies

/// Lets the main queue run what was queued on it (observers, merges).
func mainTurn() async {
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in DispatchQueue.main.async { done.resume() } }
}

print("\n— Topologies —")

// Two-tier with auto-merge: updates commit to the root; this main context merges every root save.
let merging = try MainContext(stack: stack, updateTarget: .rootContext(autoMerge: true))
// Two-tier without merge: this main context keeps the view it had until it resets.
let quiet = try MainContext(stack: stack, updateTarget: .rootContext(autoMerge: false))
let farmerHere = try merging.fetch(Person.self, %"name" == "Farmer")!
let farmerThere = try quiet.fetch(Person.self, %"name" == "Farmer")!
try merging.beginUpdateAndWait { update in
    try update.use(farmerHere).age = 29
    try update.commit()
}
try await stack.flush()
await mainTurn()
print("Two-tier: the farmer had a birthday. Auto-merge sees \(farmerHere.age); without merge: \(farmerThere.age) until reset, ", terminator: "")
quiet.reset()
print("then \(try quiet.fetch(Person.self, %"name" == "Farmer")!.age).")

// Per-consumer contexts: a stack without root, one shared writer, a screen reset on its commits.
// (On SQLite a file of its own; on PostgreSQL the same database: a second stack on it, as a
// second app server would be, so the screen counts everyone.)
let consumerStack = try Stack(model: Model(Person.self, Pet.self), rootContext: .none)
switch place {
case .file: try consumerStack.addDatabaseStore(at: directory.appendingPathComponent("consumers-\(UUID().uuidString).sqlite"))
case .postgres: try place.add(to: consumerStack)
}
let updater = try Context(stack: consumerStack, updateTarget: .persistentStore, updateOrder: .serial)
let screen = try MainContext(stack: consumerStack, updateTarget: .persistentStore, resetOnCommitOf: updater)
let token = updater.observeCommit { commit in
    // The screen was reset just before this runs, so it shows the commit.
    let count = (try? screen.fetchCount(Person.self)) ?? 0
    print("Per-consumer: a commit inserted \(commit.inserted.count), updated \(commit.updated.count) (keys \(commit.updated.flatMap { commit.changedKeys(of: $0) }.sorted())), deleted \(commit.deleted.count); the screen now counts \(count) people.")
}
try updater.beginUpdateAndWait { update in
    for name in ["Ann", "Bob"] { try update.create(Person.self).name = name }
    try update.commit()  // in the store when this returns
}
await mainTurn()
try updater.beginUpdateAndWait { update in
    try update.fetch(Person.self, %"name" == "Bob")?.age = 30
    try update.commit()
}
await mainTurn()

// Serial updates: four concurrent increments of one counter, none lost.
let counter = try MainContext(stack: consumerStack, updateOrder: .serial)
let counterID = try counter.beginUpdateAndWait { update in
    let tally = try update.create(Pet.self)
    tally.name = "tally"
    try update.commit()
    return tally.objectID
}
await withTaskGroup(of: Void.self) { group in
    for _ in 0..<4 {
        group.addTask {
            for _ in 0..<25 {
                try? counter.beginUpdateAndWait { update in
                    try update.fetch(Pet.self, id: counterID)?.age += 1
                    try update.commit()
                }
            }
        }
    }
}
print("Serial: 4 tasks × 25 increments → \(try counter.fetch(Pet.self, id: counterID)!.age).")
// MARK: - Live results

print("\n— Live results —")
let live = try FetchedResults(context: world, Person.self, %"age" >= 18,
                              orderBy: .ascending("location") | .ascending("name"), sectionBy: %"location")
@MainActor func showLive() {
    for section in live.sections { print("  [\(section.name ?? "no location")] \(section.objects.map(\.name).joined(separator: ", "))") }
}
showLive()
live.onChange = { change in print("A commit landed: \(change)") }
let watch = world.observe(knight!) { change in print("The knight changed: \(change.changedKeys.sorted())") }
try world.beginUpdateAndWait { update in
    try update.use(knight!).location = "Taipei"      // moves into the farmer's section
    let pilgrim = try update.create(Person.self)     // a new section
    (pilgrim.name, pilgrim.age, pilgrim.location) = ("Pilgrim", 40, "Kyoto")
    try update.commit()
}
await mainTurn()
showLive()
withExtendedLifetime((token, watch)) {}

/// Counts the statements `stack.trace` reports. `@unchecked Sendable`: `lock` guards `count`.
final class StatementCount: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
