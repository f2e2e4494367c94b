"""The long-term protocol of Time-Series-Library and the papers it reproduces (Informer onward): each dataset's own
split (ETT's 12/4/4 months, 7:1:2 by ratio for the custom datasets, PEMS 6:2:2 without lookback), every test
window scored unless --test_drop_last asks for the original code's whole batches."""
from data_provider.protocols import Protocol

PROTOCOLS = [Protocol("tslib")]  # thuml/Time-Series-Library's data_provider/data_loader.py
