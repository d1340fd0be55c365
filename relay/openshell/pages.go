package openshell

import (
	"context"
	"errors"
	"fmt"
)

// listPage is how many objects a List call asks the gateway for at once.
const listPage = 100

// maxListed bounds what one listing holds: a gateway that answers full
// pages without end cannot make the client fetch and keep them forever.
const maxListed = 100_000

// ErrListTooLong is a listing the gateway did not end within maxListed
// objects.
var ErrListTooLong = errors.New("openshell: listing too long")

// listAll pages through one of the gateway's List calls, fetch answering
// the page at an offset, until a page comes back short.
func listAll[P, T any](ctx context.Context, what string, fetch func(ctx context.Context, offset uint32) ([]P, error), conv func(P) T) ([]T, error) {
	var all []T
	for off := uint32(0); ; off += listPage {
		got, err := fetch(ctx, off)
		if err != nil {
			return nil, err
		}
		if len(got) > listPage || len(all)+len(got) > maxListed {
			return nil, fmt.Errorf("list %s: %w: more than %d", what, ErrListTooLong, min(len(got), maxListed))
		}
		for _, p := range got {
			all = append(all, conv(p))
		}
		if len(got) < listPage {
			return all, nil
		}
	}
}
