"""The runtime's protocols, built on the network and the shares: the evaluation of a polynomial program on shares
(a party's context), secure comparison, the masked and Shamir secure sums, the private set intersection, the
input streams, and shard workers."""
