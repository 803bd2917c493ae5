"""The networks agents are made of (flax): torsos for vectors and images, recurrent cells,
heads, the initialisers and the action distributions."""
