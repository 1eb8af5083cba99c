"""Networks: their config, the torsos (MLP and image encoders) and the heads each algorithm builds."""
