package gateway

import (
	"math/rand/v2"
	"strings"
)

// A sandbox created without a name gets one as upstream gives it
// (grpc/sandbox.rs generate_routable_name): two words joined by '-', as
// the petname crate's petname(2, "-") makes them, cut to maxNameLen with a
// trailing '-' trimmed. These short lists stand in for the crate's; every
// word is lowercase ASCII, so every name is a valid DNS label.
var (
	petAdjectives = strings.Fields(`
		able alert amused apt awake bold brave brief bright brisk calm
		candid civil clean clear clever close cool cosmic crisp cunning
		curious dapper daring deep direct eager easy epic equal exact fair
		fancy fast fine firm fit fluent fond frank free fresh full funny
		game gentle giving glad golden good grand great happy hardy hearty
		helped heroic honest hopeful humble ideal jolly just keen kind
		known large lasting legal light live lively loved loving loyal
		lucid lucky magic major merry mighty modest moral moving musical
		native neat nice noble novel open optimal patient perfect pet
		picked pleasant polite precise present prime proper proud quick
		quiet rapid rare ready real regal relaxed rich right robust
		sacred safe saved secure select sharp shining simple sincere
		skilled smart smooth social solid sound special splendid stable
		steady still strong sunny super sure sweet swift tender tidy
		tight topical touching tough true trusty upright usable useful
		valid vast verified vital warm welcome well whole wise witty
		worthy`)
	petNouns = strings.Fields(`
		aardvark alpaca ant ape badger bat bear beaver bee beetle bison
		boar bobcat buck bug bull camel cat cattle chick chimp clam cobra
		cod colt condor cow coyote crab crane crow cub deer dingo dodo doe
		dog dolphin donkey dove drake duck eagle eel egret elk emu falcon
		fawn ferret finch fish flea fly foal fowl fox frog gar gator gecko
		gibbon gnat gnu goat goose gopher grouse gull hare hawk hen heron
		hog hornet horse hound husky hyena ibex imp jackal jaguar jay kid
		kit kite kiwi koala krill lab lamb lark lemur leopard lion lizard
		llama lobster locust loon louse lynx macaw mako mammal mantis mare
		marlin marmot marten midge mink mite mole molly monkey moose moth
		mouse mule mullet newt nutria ocelot octopus orca osprey otter owl
		ox oyster panda panther parrot pegasus pelican penguin pig pigeon
		pika pony poodle porpoise possum prawn puma pup python quail
		rabbit raccoon ram rat raven ray redbird reindeer rhino robin
		rooster sailfish salmon satyr seal shark sheep shrew shrimp skink
		skunk sloth slug snail snake snapper snipe sparrow spider squid
		stag starfish stork sunbird swan swift tahr tapir tarpon termite
		terrier tick tiger toad tortoise trout tuna turkey turtle unicorn
		urchin viper vulture wahoo walrus warthog wasp weasel whale
		whippet wildcat wolf wombat worm wren yak zebra`)
)

// petName is petname(2, "-") cut as upstream's generate_routable_name
// cuts it.
func petName() string {
	name := pick(petAdjectives) + "-" + pick(petNouns)
	return strings.TrimRight(name[:min(len(name), maxNameLen)], "-")
}

// randomName is upstream's fallback generate_name: six random lowercase
// letters.
func randomName() string {
	b := make([]byte, 6)
	for i := range b {
		b[i] = byte('a' + rand.IntN(26))
	}
	return string(b)
}

func pick(words []string) string { return words[rand.IntN(len(words))] }

// freeName returns a generated name no sandbox of workspace has. Upstream
// leaves a clash to the store's unique check; a few tries here make one
// practically impossible, and the random fallback has 26^6 names.
// Callers hold r.mu.
func (r *registry) freeName(workspace string) string {
	for range 16 {
		if name := petName(); r.name[key(workspace, name)] == nil {
			return name
		}
	}
	for {
		if name := randomName(); r.name[key(workspace, name)] == nil {
			return name
		}
	}
}
