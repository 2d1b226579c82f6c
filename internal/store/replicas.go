package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// PublishOnMaster runs Publish on one connection of the master that holds
// partition sh, then WAIT on that connection for replicas within timeout:
// WAIT counts the replicas that acknowledged the writes of its own
// connection, and cannot run inside a script. client is a *redis.Client
// (plain or Sentinel), which lends one pooled connection, or a
// *redis.ClusterClient, whose master for the partition's slot comes from
// its view of the slots. acked is how many replicas confirmed; waitErr is
// WAIT's error, the messages being stored on the master then. The
// connection goes back to the pool afterwards (go-redis drops it instead
// when it failed, or ctx ended with a reply pending).
func PublishOnMaster[C PubCall](ctx context.Context, client redis.UniversalClient, sh Shard, o PublishOpts, batch []C, replicas int, timeout time.Duration) (r PublishReply, acked int64, waitErr, err error) {
	master, ok := client.(*redis.Client)
	if cluster, isCluster := client.(*redis.ClusterClient); isCluster {
		if master, err = cluster.MasterForKey(ctx, sh.Waiting()); err != nil {
			return r, 0, nil, err
		}
	} else if !ok {
		return r, 0, nil, fmt.Errorf("PublisherConfig.MinReplicas needs a *redis.Client or *redis.ClusterClient, not %T", client)
	}
	conn := master.Conn()
	defer conn.Close()
	if r, err = Publish(ctx, conn, sh, o, batch); err != nil {
		return r, 0, nil, err
	}
	acked, waitErr = conn.Wait(ctx, replicas, timeout).Result()
	return r, acked, waitErr, nil
}

// RetryOnCluster reports whether a PublishOnMaster that failed with err
// may be sent again once the cluster's view of the slots is reloaded
// (which it does): the cluster client's view only follows the
// redirections of its own commands, so a redirection, a cluster that is
// down or a master that refuses connections (a failover) reloads it; none
// of them ran the script. False for a client of another kind.
func RetryOnCluster(ctx context.Context, client redis.UniversalClient, err error) bool {
	cluster, ok := client.(*redis.ClusterClient)
	if !ok {
		return false
	}
	cluster.ReloadState(ctx)
	var op *net.OpError
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask || redis.IsClusterDownError(err) || redis.IsTryAgainError(err) ||
		(errors.As(err, &op) && op.Op == "dial")
}
