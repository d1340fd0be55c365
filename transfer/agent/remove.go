package agent

import (
	"context"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// Remove deletes paths in the sandbox, directories with their contents,
// in one call. A missing path is not an error; the root of the file
// system and the workspace itself are refused (ErrInvalidPath), as is
// any path before anything is removed. A path named as a staging
// directory (archive.IsStagingName) is removed only once no transfer
// holds it (archive.RemoveStaging): the call waits for that until ctx
// ends, and a path of that name that is not a directory of the agent's
// user is refused.
func (c *Client) Remove(ctx context.Context, paths ...string) error {
	for _, p := range paths {
		if err := wire.CheckRemotePath("remove", p); err != nil {
			return err
		}
	}
	if len(paths) == 0 {
		return nil
	}
	_, err := c.rpc.Remove(ctx, &agentv1.RemoveRequest{Paths: paths})
	return c.callErr(opPaths("remove", paths), err)
}
